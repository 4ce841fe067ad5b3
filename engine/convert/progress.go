package convert

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress draws "[=====>    ] 12/245 tensors  1.2/70.5 GB  ETA 3m12s" on
// one terminal line, at most every 200 ms. A nil writer draws nothing.
type progress struct {
	w            io.Writer
	mu           sync.Mutex
	tensors      int
	done         int
	total, bytes int64
	began, drawn time.Time
	current      string
}

func newProgress(w io.Writer, items []item) *progress {
	p := &progress{w: w, tensors: len(items), began: time.Now()}
	for _, it := range items {
		for _, t := range it.src {
			p.total += t.Size()
		}
	}
	return p
}

func (p *progress) start(name string) {
	p.mu.Lock()
	p.current = name
	p.mu.Unlock()
	p.draw(false)
}

func (p *progress) addBytes(n int64) {
	p.mu.Lock()
	p.bytes += n
	p.mu.Unlock()
	p.draw(false)
}

func (p *progress) tensorDone() {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
	p.draw(false)
}

func (p *progress) finish() {
	p.draw(true)
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) draw(force bool) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(p.drawn) < 200*time.Millisecond {
		return
	}
	p.drawn = now
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.bytes) / float64(p.total)
	}
	const width = 24
	fill := int(frac * width)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	eta := "--"
	if el := now.Sub(p.began); p.bytes > 0 && frac < 1 {
		eta = (time.Duration(float64(el) / frac * (1 - frac))).Round(time.Second).String()
	} else if frac >= 1 {
		eta = "0s"
	}
	fmt.Fprintf(p.w, "\r[%s] %d/%d tensors  %s/%s  ETA %-8s %-40.40s", bar, p.done, p.tensors, human(p.bytes), human(p.total), eta, p.current)
}

// human formats a byte count with a binary-free decimal unit (GB as disks say).
func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
