package server

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Prometheus text exposition (version 0.0.4), written by hand: a few
// counters, gauges and histograms are all the daemon needs.

// histogram is a cumulative Prometheus histogram over fixed upper bounds.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, labels string) {
	var cum uint64
	sep := ""
	if labels != "" {
		sep = ","
	}
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%s%sle=%q} %d\n", name, labels, sep, fmtFloat(b), cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, cum)
	br := ""
	if labels != "" {
		br = "{" + labels + "}"
	}
	fmt.Fprintf(w, "%s_sum%s %s\n%s_count%s %d\n", name, br, fmtFloat(h.sum), name, br, h.n)
}

func fmtFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

var latencyBounds = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// metrics holds the daemon's counters. Gauges that describe live state
// (queue depth, resident bytes, cache size) are read at scrape time.
type metrics struct {
	mu          sync.Mutex
	requests    map[[2]string]uint64 // route, status code
	latency     map[string]*histogram
	inputTokens uint64
	tokensHist  *histogram
	batchSizes  *histogram
	queueWait   *histogram
	decisions   uint64
	panics      uint64
	loads       uint64
	unloads     uint64
	// recent is a ring of recent decisions' latencies as their clients
	// waited (queue and engine), timed-out ones at their elapsed time: the
	// p50/p99 of clef ps and the menu bar.
	recent ring
	// service is a ring of recent decisions' engine times: what the
	// Retry-After of a full queue is estimated from.
	service ring
}

// ring holds the last values observed, in seconds.
type ring struct {
	xs   []float64
	next int
	full bool
}

func newRing(n int) ring { return ring{xs: make([]float64, n)} }

func (r *ring) add(v float64) {
	r.xs[r.next] = v
	r.next = (r.next + 1) % len(r.xs)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring) values() []float64 {
	n := r.next
	if r.full {
		n = len(r.xs)
	}
	return append([]float64(nil), r.xs[:n]...)
}

func newMetrics() *metrics {
	return &metrics{
		requests:   map[[2]string]uint64{},
		latency:    map[string]*histogram{},
		tokensHist: newHistogram(64, 256, 1024, 4096, 16384, 65536),
		batchSizes: newHistogram(1, 2, 4, 8, 16, 32, 64),
		queueWait:  newHistogram(latencyBounds...),
		recent:     newRing(1024),
		service:    newRing(1024),
	}
}

// request records one finished HTTP request.
func (m *metrics) request(route string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{route, strconv.Itoa(code)}]++
	h := m.latency[route]
	if h == nil {
		h = newHistogram(latencyBounds...)
		m.latency[route] = h
	}
	h.observe(d.Seconds())
}

// decision records one successful decision: its engine time run and the
// latency its client saw.
func (m *metrics) decision(inputTokens int, run, latency time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions++
	if inputTokens > 0 {
		m.inputTokens += uint64(inputTokens)
		m.tokensHist.observe(float64(inputTokens))
	}
	m.recent.add(latency.Seconds())
	m.service.add(run.Seconds())
}

// timedOut records a decision that ran past its deadline, at the time it
// took (its deadline), so the percentiles do not leave it out.
func (m *metrics) timedOut(elapsed time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recent.add(elapsed.Seconds())
}

func (m *metrics) batch(n int) { m.mu.Lock(); m.batchSizes.observe(float64(n)); m.mu.Unlock() }
func (m *metrics) waited(d time.Duration) {
	m.mu.Lock()
	m.queueWait.observe(d.Seconds())
	m.mu.Unlock()
}
func (m *metrics) panicked()                  { m.mu.Lock(); m.panics++; m.mu.Unlock() }
func (m *metrics) loaded()                    { m.mu.Lock(); m.loads++; m.mu.Unlock() }
func (m *metrics) unloaded()                  { m.mu.Lock(); m.unloads++; m.mu.Unlock() }
func (m *metrics) counts() (decisions uint64) { m.mu.Lock(); defer m.mu.Unlock(); return m.decisions }

// quantiles returns the given quantiles (0..1) of recent decision
// latencies (timed-out decisions included) in milliseconds, 0 when there
// are none.
func (m *metrics) quantiles(qs ...float64) []float64 {
	m.mu.Lock()
	xs := m.recent.values()
	m.mu.Unlock()
	return quantilesOf(xs, qs)
}

// serviceQuantile returns quantile q of recent decisions' engine time in
// milliseconds, 0 when there are none.
func (m *metrics) serviceQuantile(q float64) float64 {
	m.mu.Lock()
	xs := m.service.values()
	m.mu.Unlock()
	return quantilesOf(xs, []float64{q})[0]
}

func quantilesOf(xs, qs []float64) []float64 {
	out := make([]float64, len(qs))
	if len(xs) == 0 {
		return out
	}
	sort.Float64s(xs)
	for i, q := range qs {
		k := int(math.Ceil(q*float64(len(xs)))) - 1
		k = max(0, min(k, len(xs)-1))
		out[i] = xs[k] * 1000
	}
	return out
}

// gauge is one value read at scrape time.
type gauge struct {
	name, help, typ string
	value           float64
}

// write renders every metric in the Prometheus text format.
func (m *metrics) write(w io.Writer, gauges []gauge) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP clef_requests_total HTTP requests by route and status code.")
	fmt.Fprintln(w, "# TYPE clef_requests_total counter")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "clef_requests_total{route=%q,code=%q} %d\n", k[0], k[1], m.requests[k])
	}
	fmt.Fprintln(w, "# HELP clef_request_duration_seconds HTTP request latency by route.")
	fmt.Fprintln(w, "# TYPE clef_request_duration_seconds histogram")
	routes := make([]string, 0, len(m.latency))
	for r := range m.latency {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	for _, r := range routes {
		m.latency[r].write(w, "clef_request_duration_seconds", fmt.Sprintf("route=%q", r))
	}
	fmt.Fprintln(w, "# HELP clef_decisions_total Decisions answered.")
	fmt.Fprintln(w, "# TYPE clef_decisions_total counter")
	fmt.Fprintf(w, "clef_decisions_total %d\n", m.decisions)
	fmt.Fprintln(w, "# HELP clef_input_tokens_total Input tokens of answered decisions.")
	fmt.Fprintln(w, "# TYPE clef_input_tokens_total counter")
	fmt.Fprintf(w, "clef_input_tokens_total %d\n", m.inputTokens)
	fmt.Fprintln(w, "# HELP clef_input_tokens Input tokens per decision.")
	fmt.Fprintln(w, "# TYPE clef_input_tokens histogram")
	m.tokensHist.write(w, "clef_input_tokens", "")
	fmt.Fprintln(w, "# HELP clef_batch_size Decisions run back to back per scheduler turn.")
	fmt.Fprintln(w, "# TYPE clef_batch_size histogram")
	m.batchSizes.write(w, "clef_batch_size", "")
	fmt.Fprintln(w, "# HELP clef_queue_wait_seconds Time a decision waited in the queue.")
	fmt.Fprintln(w, "# TYPE clef_queue_wait_seconds histogram")
	m.queueWait.write(w, "clef_queue_wait_seconds", "")
	fmt.Fprintln(w, "# HELP clef_panics_total Panics recovered while serving.")
	fmt.Fprintln(w, "# TYPE clef_panics_total counter")
	fmt.Fprintf(w, "clef_panics_total %d\n", m.panics)
	fmt.Fprintln(w, "# HELP clef_model_loads_total Model loads (start and reloads after idle).")
	fmt.Fprintln(w, "# TYPE clef_model_loads_total counter")
	fmt.Fprintf(w, "clef_model_loads_total %d\n", m.loads)
	fmt.Fprintln(w, "# HELP clef_model_unloads_total Model unloads after the idle timeout.")
	fmt.Fprintln(w, "# TYPE clef_model_unloads_total counter")
	fmt.Fprintf(w, "clef_model_unloads_total %d\n", m.unloads)
	for _, g := range gauges {
		typ := g.typ
		if typ == "" {
			typ = "gauge"
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", g.name, g.help, g.name, typ, g.name, fmtFloat(g.value))
	}
}
