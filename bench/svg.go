package bench

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
)

// point is one plotted value.
type point struct {
	x, y  float64
	label string
}

// series is one model's points.
type series struct {
	name string
	pts  []point
}

// plot is a small scatter/line chart written as plain SVG.
type plot struct {
	title, xLabel, yLabel string
	logX, logY            bool
	lines                 bool // join each series' points
	series                []series
}

// Plot geometry.
const (
	svgW, svgH             = 760, 460
	padL, padR, padT, padB = 70, 170, 40, 50
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// WriteLatencySVG plots p50 latency against input tokens, one line per
// model (log-log).
func (r *Report) WriteLatencySVG(w io.Writer) error {
	p := plot{title: "p50 latency per decision", xLabel: "input tokens", yLabel: "p50 latency (ms)", logX: true, logY: true, lines: true}
	for _, m := range r.Models {
		s := series{name: m.Name}
		for _, sc := range m.Scenarios {
			s.pts = append(s.pts, point{x: float64(sc.InputTokens), y: sc.Latency.P50})
		}
		sort.Slice(s.pts, func(i, j int) bool { return s.pts[i].x < s.pts[j].x })
		p.series = append(p.series, s)
	}
	return p.write(w)
}

// WriteAgreementSVG plots each model's mean total variation from the
// reference against its file size (the reference sits at 0).
func (r *Report) WriteAgreementSVG(w io.Writer) error {
	p := plot{title: "agreement with " + r.Reference + " against file size", xLabel: "file size (MiB)", yLabel: "mean total variation"}
	for _, m := range r.Models {
		tv := 0.0
		label := m.Name + " (reference)"
		if a := m.Agreement["all"]; a != nil {
			tv = a.MeanTV
			label = fmt.Sprintf("%s: top-1 %.3f", m.Name, a.Top1)
		} else if !m.Reference {
			continue
		}
		p.series = append(p.series, series{name: m.Name, pts: []point{{x: float64(m.FileBytes) / (1 << 20), y: tv, label: label}}})
	}
	return p.write(w)
}

// axis maps values to pixels.
type axis struct {
	lo, hi   float64
	log      bool
	pix0, px float64 // pixel of lo and length (may be negative)
}

func (a axis) at(v float64) float64 {
	if a.log {
		v = math.Log10(math.Max(v, 1e-12))
	}
	if a.hi == a.lo {
		return a.pix0 + a.px/2
	}
	return a.pix0 + (v-a.lo)/(a.hi-a.lo)*a.px
}

// ticks returns tick values in data units.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := math.Floor(a.lo); e <= math.Ceil(a.hi); e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if lv := math.Log10(v); lv >= a.lo-1e-9 && lv <= a.hi+1e-9 {
					out = append(out, v)
				}
			}
		}
		return out
	}
	span := a.hi - a.lo
	if span <= 0 {
		return []float64{a.lo}
	}
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// newAxis fits values into [pix0, pix0+px].
func newAxis(vals []float64, log bool, pix0, px float64) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if log {
			if v <= 0 {
				continue
			}
			v = math.Log10(v)
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if log {
		lo, hi = math.Floor(lo*5)/5, math.Ceil(hi*5)/5
		if hi-lo < 0.3 {
			lo, hi = lo-0.2, hi+0.2
		}
	} else {
		if lo > 0 {
			lo = 0
		}
		if hi == lo {
			hi = lo + 1
		}
		hi += (hi - lo) * 0.08
	}
	return axis{lo: lo, hi: hi, log: log, pix0: pix0, px: px}
}

func tickLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case math.Abs(v) >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%g", math.Round(v*100)/100)
	}
	return fmt.Sprintf("%.3g", v)
}

func (p *plot) write(w io.Writer) error {
	var xs, ys []float64
	for _, s := range p.series {
		for _, pt := range s.pts {
			xs, ys = append(xs, pt.x), append(ys, pt.y)
		}
	}
	plotW, plotH := float64(svgW-padL-padR), float64(svgH-padT-padB)
	ax := newAxis(xs, p.logX, padL, plotW)
	ay := newAxis(ys, p.logY, padT+plotH, -plotH)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(p.title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", padL, padT, plotW, plotH)
	for _, t := range ax.ticks() {
		x := ax.at(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#ddd"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+16, tickLabel(t))
	}
	for _, t := range ay.ticks() {
		y := ay.at(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`, padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, tickLabel(t))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-10, html.EscapeString(p.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.0f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padT+plotH/2, html.EscapeString(p.yLabel))
	for i, s := range p.series {
		c := palette[i%len(palette)]
		if p.lines && len(s.pts) > 1 {
			b.WriteString(`<polyline fill="none" stroke-width="2" stroke="` + c + `" points="`)
			for k, pt := range s.pts {
				if k > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%.1f,%.1f", ax.at(pt.x), ay.at(pt.y))
			}
			b.WriteString("\"/>\n")
		}
		for _, pt := range s.pts {
			x, y := ax.at(pt.x), ay.at(pt.y)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s: %g, %g</title></circle>`+"\n", x, y, c, html.EscapeString(s.name), pt.x, pt.y)
			if pt.label != "" {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", x+6, y-6, c, html.EscapeString(pt.label))
			}
		}
		ly := padT + 14 + 18*i
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", svgW-padR+16, ly-10, c, svgW-padR+34, ly, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}
