package bench

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes report.md: the latency table across models with
// their agreement figures, agreement per question type, per-scenario detail
// and the kernel roofline table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# clef bench\n\n%s/%s, %d CPUs, %s · warm-up %d, %d reps · max length %d",
		r.Host.GOOS, r.Host.GOARCH, r.Host.CPUs, r.Host.GoVersion, r.Settings.Warmup, r.Settings.Reps, r.Settings.MaxLength)
	if r.Settings.URL != "" {
		fmt.Fprintf(&b, " · daemon %s", r.Settings.URL)
	}
	if r.Reference != "" {
		fmt.Fprintf(&b, " · agreement against **%s**", r.Reference)
	}
	b.WriteString("\n\n")

	if len(r.Models) > 0 && len(r.Scenarios) > 0 {
		if len(r.Scenarios) <= maxInlineScenarios {
			r.writeCombinedTable(&b)
		} else {
			r.writeSplitTables(&b)
		}
		b.WriteString("\n")

		hasAgreement := false
		for _, m := range r.Models {
			hasAgreement = hasAgreement || m.Agreement != nil
		}
		if hasAgreement {
			b.WriteString("## Agreement with the reference per question type\n\n")
			b.WriteString("| model | type | questions | top-1 | mean TV | max \\|dp\\| | mean KL |\n|---|---|---:|---:|---:|---:|---:|\n")
			for _, m := range r.Models {
				for _, t := range []string{"noul", "choice", "score", "all"} {
					if a := m.Agreement[t]; a != nil {
						fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %.4f | %.4f | %.5f |\n", m.Name, t, a.Questions, a.Top1, a.MeanTV, a.MaxAbsDP, a.MeanKL)
					}
				}
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "![p50 latency against input tokens](%s)\n![agreement against file size](%s)\n\n", LatencySVG, AgreementSVG)

		b.WriteString("## Per scenario\n\n")
		for _, m := range r.Models {
			fmt.Fprintf(&b, "### %s (%s, backend %s)\n\n", m.Name, m.Quant, m.Backend)
			b.WriteString("| scenario | tokens | runs | p50 | p95 | p99 | tok/s | prefill tok/s | tokenize | encode | media decode | processors | thinker | of which towers | head | peak RSS |\n")
			b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, s := range m.Scenarios {
				fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f | %.1f | %.0f | %.0f |", s.Scenario, s.InputTokens, s.Runs,
					s.Latency.P50, s.Latency.P95, s.Latency.P99, s.TokensPerSecond, s.PrefillTokensPerSecond)
				if st := s.Stages; st != nil {
					fmt.Fprintf(&b, " %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f |", st.Tokenize, st.Encode, st.Decode, st.Processor, st.Thinker, st.Towers, st.Head)
				} else {
					b.WriteString(" – | – | – | – | – | – | – |")
				}
				fmt.Fprintf(&b, " %s |\n", humanBytes(s.PeakRSSBytes))
			}
			b.WriteString("\n")
		}
		if len(r.Skipped) > 0 {
			b.WriteString("Skipped:\n\n")
			for _, s := range r.Skipped {
				fmt.Fprintf(&b, "- %s: %s\n", s.Name, s.Reason)
			}
			b.WriteString("\n")
		}
	}
	if r.Kernels != nil {
		r.Kernels.writeMarkdown(&b)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// maxInlineScenarios is how many scenarios fit as columns of the combined
// latency and agreement table; with more, latency gets its own table with
// one row per scenario.
const maxInlineScenarios = 4

// agreementCells writes a model's overall agreement (or "reference").
func agreementCells(b *bytes.Buffer, m *ModelReport) {
	if a := m.Agreement["all"]; a != nil {
		fmt.Fprintf(b, " %.3f | %.4f | %.4f | %.5f |\n", a.Top1, a.MeanTV, a.MaxAbsDP, a.MeanKL)
	} else if m.Reference {
		b.WriteString(" reference | | | |\n")
	} else {
		b.WriteString(" – | – | – | – |\n")
	}
}

// writeCombinedTable writes one row per model: size, load, RSS, p50 per
// scenario and the agreement figures.
func (r *Report) writeCombinedTable(b *bytes.Buffer) {
	b.WriteString("## Latency across quantizations (p50 ms) and agreement\n\n")
	b.WriteString("| model | size | load s | peak RSS |")
	for _, s := range r.Scenarios {
		fmt.Fprintf(b, " %s (%d tok) |", s.Name, s.InputTokens)
	}
	b.WriteString(" top-1 | mean TV | max \\|dp\\| | mean KL |\n|---|---:|---:|---:|")
	b.WriteString(strings.Repeat("---:|", len(r.Scenarios)+4) + "\n")
	for _, m := range r.Models {
		fmt.Fprintf(b, "| %s | %s | %.2f | %s |", m.Name, humanBytes(m.FileBytes), m.LoadSeconds, humanBytes(m.PeakRSSBytes))
		for i := range r.Scenarios {
			if i < len(m.Scenarios) {
				fmt.Fprintf(b, " %.1f |", m.Scenarios[i].Latency.P50)
			} else {
				b.WriteString(" – |")
			}
		}
		agreementCells(b, m)
	}
}

// writeSplitTables writes the models with their agreement, then p50
// latency with one row per scenario and one column per model.
func (r *Report) writeSplitTables(b *bytes.Buffer) {
	b.WriteString("## Models and agreement\n\n| model | quant | size | load s | peak RSS | top-1 | mean TV | max \\|dp\\| | mean KL |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range r.Models {
		fmt.Fprintf(b, "| %s | %s | %s | %.2f | %s |", m.Name, m.Quant, humanBytes(m.FileBytes), m.LoadSeconds, humanBytes(m.PeakRSSBytes))
		agreementCells(b, m)
	}
	b.WriteString("\n## p50 latency (ms) per scenario\n\n| scenario | tokens |")
	for _, m := range r.Models {
		fmt.Fprintf(b, " %s |", m.Name)
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(r.Models)) + "\n")
	for i, s := range r.Scenarios {
		fmt.Fprintf(b, "| %s | %d |", s.Name, s.InputTokens)
		for _, m := range r.Models {
			if i < len(m.Scenarios) {
				fmt.Fprintf(b, " %.1f |", m.Scenarios[i].Latency.P50)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
}

// humanBytes formats a size in binary units ("–" for 0: not measured).
func humanBytes(n int64) string {
	switch {
	case n <= 0:
		return "–"
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
