package qwen3moe

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// textIDs reads a text case's ids (positions are plain text there).
func textIDs(t *testing.T, cs string) []int {
	t.Helper()
	ids64 := loadNpy(t, omniDir+cs+"_input_ids.npy").I
	ids := make([]int, len(ids64))
	for i, v := range ids64 {
		ids[i] = int(v)
	}
	return ids
}

// TestPrefixResume keeps the keys and values of a prefix on one run and
// resumes a second run after it: the rows after the prefix, and the stored
// hidden rows of the prefix, match the full run's, whatever the chunking
// (chunks smaller than, straddling and larger than the prefix).
func TestPrefixResume(t *testing.T) {
	ctx := context.Background()
	ids := textIDs(t, "text_len40")
	L := len(ids)
	for _, chunk := range []int{0, 7, 16} {
		m := openOmni(t, 2)
		m.Chunk = chunk
		full, err := m.Hidden(ctx, ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		H := m.Config.Hidden
		for _, P := range []int{1, 7, 13, 39} {
			t.Run(fmt.Sprintf("chunk=%d/P=%d", chunk, P), func(t *testing.T) {
				h, pre, err := m.HiddenPrefix(ctx, Input{IDs: ids}, P)
				if err != nil {
					t.Fatal(err)
				}
				if r, _ := relErr(h, full); r > 1e-6 {
					t.Errorf("keeping a prefix changed the hidden states: rel %g", r)
				}
				kv := m.Config.KVHeads * m.Config.HeadDim
				if pre.Len != P || len(pre.Hidden) != P*H || len(pre.K) != m.Config.Layers || len(pre.K[0]) != P*kv {
					t.Fatalf("prefix shape: len %d hidden %d layers %d k0 %d", pre.Len, len(pre.Hidden), len(pre.K), len(pre.K[0]))
				}
				// Bytes counts what the prefix really holds: its values in
				// whole pages, and the headers around them.
				payload := int64(4 * (P*H + 2*m.Config.Layers*P*kv))
				if got := pre.Bytes(); got != m.PrefixBytes(P) || got < payload || got > payload+pageSize+prefixOverhead(m.Config.Layers) {
					t.Errorf("Bytes %d, PrefixBytes %d, want %d of values in whole pages and %d of headers", got, m.PrefixBytes(P), payload, prefixOverhead(m.Config.Layers))
				}
				for l := range pre.K {
					if cap(pre.K[l]) != len(pre.K[l]) || cap(pre.V[l]) != len(pre.V[l]) {
						t.Errorf("layer %d: keys or values over capacity (%d/%d, %d/%d)", l, len(pre.K[l]), cap(pre.K[l]), len(pre.V[l]), cap(pre.V[l]))
					}
				}
				if r, _ := relErr(pre.Hidden, full[:P*H]); r > 1e-6 {
					t.Errorf("stored hidden rows differ: rel %g", r)
				}
				rest, err := m.Hidden(ctx, nil, nil) // no tokens: an error, not a panic
				if err == nil {
					t.Errorf("empty input accepted: %d values", len(rest))
				}
				rest, _, err = m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: pre}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(rest) != (L-P)*H {
					t.Fatalf("resumed run gave %d values, want %d", len(rest), (L-P)*H)
				}
				r, _ := relErr(rest, full[P*H:])
				if r > 1e-6 {
					t.Errorf("resumed rows differ from the full run: rel %g", r)
				}
				// Explicit positions equal to the implicit ones.
				rest2, _, err := m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: pre, Positions: TextPositions(L)[P:]}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if r, _ := relErr(rest2, rest); r != 0 {
					t.Errorf("explicit positions differ: rel %g", r)
				}
			})
		}
	}
}

// TestPrefixResumeWrongPrefix: a resumed run is sensitive to the prefix it
// is given (the test can fail), and a prefix of the wrong shape is refused.
func TestPrefixResumeWrongPrefix(t *testing.T) {
	ctx := context.Background()
	ids := textIDs(t, "text_len40")
	m := openOmni(t, 1)
	m.Chunk = 16
	full, err := m.Hidden(ctx, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	P, H := 20, m.Config.Hidden
	other := append([]int{ids[1]}, ids[1:P]...)
	_, pre, err := m.HiddenPrefix(ctx, Input{IDs: other}, P)
	if err != nil {
		t.Fatal(err)
	}
	rest, _, err := m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: pre}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := relErr(rest, full[P*H:]); r < 1e-3 {
		t.Errorf("resuming after another prefix changed nothing (rel %g)", r)
	}

	bad := *pre
	bad.K = bad.K[:1]
	if _, _, err := m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: &bad}, 0); err == nil || !strings.Contains(err.Error(), "not from this model") {
		t.Errorf("prefix with missing layers: %v", err)
	}
	bad = *pre
	bad.V = append([][]float32{pre.V[0][:len(pre.V[0])-1]}, pre.V[1:]...)
	if _, _, err := m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: &bad}, 0); err == nil || !strings.Contains(err.Error(), "layer 0") {
		t.Errorf("prefix with short values: %v", err)
	}
	if _, _, err := m.HiddenPrefix(ctx, Input{IDs: ids[P:], Past: pre}, 3); err == nil {
		t.Error("keeping a prefix while resuming accepted")
	}
	for _, save := range []int{-1, len(ids) + 1} {
		if _, _, err := m.HiddenPrefix(ctx, Input{IDs: ids}, save); err == nil {
			t.Errorf("save %d accepted", save)
		}
	}
}

// plainBackend hides the backend's RowChunker.
type plainBackend struct{ backend.Backend }

func TestPrefixNeedsRowChunker(t *testing.T) {
	ctx := context.Background()
	m := openOmni(t, 1)
	m.b = plainBackend{m.b}
	if m.CanResume() {
		t.Fatal("CanResume without a RowChunker")
	}
	ids := textIDs(t, "text_len9")
	if _, _, err := m.HiddenPrefix(ctx, Input{IDs: ids}, 3); err == nil || !strings.Contains(err.Error(), "RowChunker") {
		t.Errorf("keeping a prefix without a RowChunker: %v", err)
	}
	if _, err := m.Hidden(ctx, ids, nil); err != nil {
		t.Errorf("plain run: %v", err)
	}
}
