package tokenizer

import "sync"

// bpe is a byte-level BPE model: a word (the raw bytes of one pre-token)
// starts as one symbol per byte, and the pair of adjacent symbols with the
// lowest merge rank is merged, leftmost first, until no pair has a rank.
type bpe struct {
	byteID [256]int32        // id of each single-byte token; -1 if the vocabulary lacks it
	merges map[uint64]uint64 // pairKey(a, b) -> rank<<32 | merged id
	// direct maps raw words to ids when the model has ignore_merges set.
	direct map[string]int32

	mu    sync.Mutex
	cache map[string][]int32
}

const (
	// smallWord is the longest word merged by the simple quadratic loop; longer
	// words use a heap over a linked list, O(n log n).
	smallWord = 48
	// cacheWord is the longest word kept in the cache, cacheSize the most words.
	cacheWord = 64
	cacheSize = 1 << 17
	noRank    = ^uint32(0)
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// lookup returns the rank and merged id of the pair (a, b).
func (m *bpe) lookup(a, b int32) (uint32, int32) {
	if v, ok := m.merges[pairKey(a, b)]; ok {
		return uint32(v >> 32), int32(uint32(v))
	}
	return noRank, -1
}

// appendWord appends the ids of one word to dst.
func (m *bpe) appendWord(dst []int, word string) []int {
	if len(word) == 0 {
		return dst
	}
	if m.direct != nil {
		if id, ok := m.direct[word]; ok {
			return append(dst, int(id))
		}
	}
	if len(word) <= cacheWord {
		m.mu.Lock()
		ids, ok := m.cache[word]
		m.mu.Unlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	var ids []int32
	if len(word) <= smallWord {
		var buf [smallWord]int32
		ids = m.mergeSmall(buf[:0], word)
	} else {
		ids = m.mergeLarge(word)
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	if len(word) <= cacheWord {
		c := append([]int32(nil), ids...)
		m.mu.Lock()
		if len(m.cache) >= cacheSize {
			clear(m.cache)
		}
		m.cache[word] = c
		m.mu.Unlock()
	}
	return dst
}

// initial appends the one-byte symbols of word; bytes without a token are
// dropped, as the reference drops characters it has no id for.
func (m *bpe) initial(syms []int32, word string) []int32 {
	for i := 0; i < len(word); i++ {
		if id := m.byteID[word[i]]; id >= 0 {
			syms = append(syms, id)
		}
	}
	return syms
}

// mergeSmall merges a short word in place: each round finds the lowest rank
// among the adjacent pairs and merges it.
func (m *bpe) mergeSmall(syms []int32, word string) []int32 {
	syms = m.initial(syms, word)
	if len(syms) < 2 {
		return syms
	}
	var rbuf [smallWord]uint32
	var nbuf [smallWord]int32
	ranks, merged := rbuf[:len(syms)-1], nbuf[:len(syms)-1]
	for i := range ranks {
		ranks[i], merged[i] = m.lookup(syms[i], syms[i+1])
	}
	for len(syms) > 1 {
		best := -1
		bestRank := noRank
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = merged[best]
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		copy(merged[best:], merged[best+1:])
		ranks, merged = ranks[:len(ranks)-1], merged[:len(merged)-1]
		if best > 0 {
			ranks[best-1], merged[best-1] = m.lookup(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], merged[best] = m.lookup(syms[best], syms[best+1])
		}
	}
	return syms
}

// symbol is one node of the linked list used for long words.
type symbol struct {
	id         int32
	prev, next int32 // neighbours; -1 at the ends
	dead       bool
}

// candHeap is a binary min-heap of candidate pairs, each packed as
// rank<<32 | position of its left symbol, so that ties go to the leftmost.
type candHeap []uint64

func (h *candHeap) push(c uint64) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[i] >= q[p] {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candHeap) pop() uint64 {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r] < q[l] {
			m = r
		}
		if q[m] >= q[i] {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// mergeLarge merges a long word with a heap of candidate pairs ordered by
// rank, then position. A candidate is stale when the pair now at its position
// has another rank (ranks name pairs one to one); stale ones are skipped.
func (m *bpe) mergeLarge(word string) []int32 {
	ids := m.initial(make([]int32, 0, len(word)), word)
	syms := make([]symbol, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: int32(i) - 1, next: int32(i) + 1}
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	h := make(candHeap, 0, len(syms))
	push := func(left int32) {
		if right := syms[left].next; right >= 0 {
			if r, _ := m.lookup(syms[left].id, syms[right].id); r != noRank {
				h.push(uint64(r)<<32 | uint64(left))
			}
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		rank, left := uint32(c>>32), int32(uint32(c))
		l := &syms[left]
		if l.dead || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		cur, merged := m.lookup(l.id, r.id)
		if cur != rank {
			continue
		}
		l.id = merged
		r.dead = true
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = left
		}
		if l.prev >= 0 {
			push(l.prev)
		}
		push(left)
	}
	out := ids[:0]
	for i := int32(0); len(syms) > 0 && i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}
