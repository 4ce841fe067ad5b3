package engine

import (
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// speedTTL is how long a measurement of the engine's speed is used: a
// measurement taken while the machine was busy with something else must
// not refuse records for long after (a refused record is not measured).
const speedTTL = 10 * time.Minute

// speed is what the engine measured of its own compute time (thinker and
// head) on records it computed whole (no cached prefix): per power-of-two
// range of record lengths, one measurement, either the time a decision
// took or, for a decision cancelled before it finished, the time it ran
// over the share of its thinker's row chunks done (a layer's later chunks
// attend to more keys, so this is a lower bound of what it would have
// taken).
//
// From them it bounds the time of a record of L tokens from below: a
// measurement of T over L0 tokens gives T·L/L0 when L0 ≤ L ≤ 2·L0 (the
// work per token grows with the length: attention reads every earlier
// key, so a longer record costs at least its share; extrapolation stops
// at twice the measured length, where a fixed cost per decision would
// start to count twice) and T·(L/L0)² when L < L0 (the cost grows at most
// with the square of the length: matmuls linearly, attention
// quadratically). The estimate is the largest of these bounds, never an
// average: it is meant to refuse only what cannot finish in time.
type speed struct {
	mu  sync.Mutex
	obs [bits.UintSize + 1]measurement // by bits.Len(tokens)
}

// measurement is one decision's compute time.
type measurement struct {
	tokens int
	took   time.Duration // the time it took, or a lower bound of it
	ran    time.Duration // the time it ran
	done   float64       // the share of its work done when it stopped (1: it finished)
	at     time.Time
}

// rate orders measurements of one length range: time per token.
func (m measurement) rate() float64 { return float64(m.took) / float64(max(1, m.tokens)) }

// observe records that a record of tokens ran ran and had done of its
// work done (1: it finished; 0: it was stopped before a measurable share).
// A measurement replaces the one of its length range when that one is
// stale, when both finished (the latest speed counts), or when it is
// slower per token (a stronger bound).
func (s *speed) observe(tokens int, ran time.Duration, done float64, now time.Time) {
	if tokens <= 0 || ran <= 0 {
		return
	}
	m := measurement{tokens: tokens, took: ran, ran: ran, done: done, at: now}
	if done > 0 && done < 1 {
		m.took = time.Duration(float64(ran) / done)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := &s.obs[bits.Len(uint(tokens))]
	if old.tokens == 0 || now.Sub(old.at) > speedTTL || (m.done == 1 && old.done == 1) || m.rate() >= old.rate() {
		*old = m
	}
}

// estimate bounds from below the compute time of a record of tokens; ok
// is false when no fresh measurement bounds it. basis says which
// measurement gave the bound, in words.
func (s *speed) estimate(tokens int, now time.Time) (d time.Duration, basis string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.obs {
		if m.tokens == 0 || now.Sub(m.at) > speedTTL || tokens > 2*m.tokens {
			continue
		}
		r := float64(tokens) / float64(m.tokens)
		b := time.Duration(float64(m.took) * r)
		if tokens < m.tokens {
			b = time.Duration(float64(m.took) * r * r)
		}
		if b > d {
			d, ok = b, true
			switch {
			case m.done == 1:
				basis = fmt.Sprintf("a %d-token record took %v", m.tokens, m.ran.Round(time.Millisecond))
			case m.done > 0:
				basis = fmt.Sprintf("a %d-token record was stopped after %v with %.1f%% of its decoder row chunks done", m.tokens, m.ran.Round(time.Millisecond), 100*m.done)
			default:
				basis = fmt.Sprintf("a %d-token record was stopped unfinished after %v", m.tokens, m.ran.Round(time.Millisecond))
			}
		}
	}
	return d, basis, ok
}
