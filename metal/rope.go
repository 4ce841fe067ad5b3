package metal

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
)

// RoPE rotates every head of x by its row's positions into a new tensor.
// The tables it reads (positions, inverse frequencies, position streams)
// are uploaded once and cached (tableCache): every layer rotates its
// queries and keys with the same tables.
func (b *Backend) RoPE(x *backend.Tensor, pos [][3]int, r backend.RoPE) (*backend.Tensor, error) {
	xh, err := b.act(x, "RoPE x")
	if err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("metal: RoPE: %w", err)
	}
	d := r.HeadDim
	if xh.cols%d != 0 {
		return nil, fmt.Errorf("metal: RoPE: head dim %d does not divide rows of %d evenly into heads", d, xh.cols)
	}
	if len(pos) != xh.rows {
		return nil, fmt.Errorf("metal: RoPE: %d positions for %d rows", len(pos), xh.rows)
	}
	flat := make([]int, 0, 3*len(pos))
	for _, p := range pos {
		for _, v := range p {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("metal: RoPE: position %d out of range", v)
			}
		}
		flat = append(flat, p[0], p[1], p[2])
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 {
		return wrapT(y), nil
	}
	pb, err := b.table(i32Bytes(flat), "RoPE positions")
	if err != nil {
		return nil, err
	}
	fb, err := b.table(f32Bytes(r.InvFreq), "RoPE frequencies")
	if err != nil {
		return nil, err
	}
	sb, err := b.table(i32Bytes(r.Streams), "RoPE streams")
	if err != nil {
		return nil, err
	}
	a := shaders.KargsRope{Tokens: int32(xh.rows), Heads: int32(xh.cols / d), HeadDim: int32(d), XStride: int32(xh.cols), YStride: int32(xh.cols)}
	err = b.run(streamCost(xh.rows*xh.cols, 8, 6), "rope_f32", [3]int{groups(d/2, 32), xh.cols / d, xh.rows}, [3]int{32, 1, 1}, shaders.Bytes(&a),
		in(1, xh), arg{Index: 2, Buf: pb}, arg{Index: 3, Buf: fb}, arg{Index: 4, Buf: sb}, out(5, y))
	return wrapT(y), err
}

// tableCache keeps the read-only tables ops upload, by content: a table is
// written once by the host and never again, so later launches can bind it
// while earlier ones still read it. It is bounded (tableBytes), least
// recently used first out.
type tableCache struct {
	seed    maphash.Seed
	entries []tableEntry // least recently used first
	bytes   int
	limit   int // bound on bytes; 0: tableBytes (tests lower it)
}

type tableEntry struct {
	key  uint64
	data []byte
	buf  gbuf
}

// tableBytes bounds the cached tables: the positions of every row chunk of
// a 64k-token state (32 chunks of ChunkRows rows, 24 KiB each; 128 of 512
// rows, 6 KiB each, on a model told to use 512) and the whole state's
// (768 KiB), with room to spare.
const tableBytes = 4 << 20

// tablesPerOp is the most tables one op binds (RoPE: positions,
// frequencies, streams). The newest tablesPerOp entries are never evicted:
// they may be tables the running op got moments before, which an eviction
// would free before its launch (a commit made to free memory inside the
// op's next upload frees what waits for the open batch).
const tablesPerOp = 3

// table returns a device buffer holding data, uploaded once.
func (b *Backend) table(data []byte, what string) (gbuf, error) {
	if len(data) == 0 {
		data = make([]byte, 4)
	}
	b.mu.Lock()
	c := &b.tables
	if c.entries == nil {
		c.seed = maphash.MakeSeed()
	}
	key := maphash.Bytes(c.seed, data)
	for i, e := range c.entries {
		if e.key == key && bytes.Equal(e.data, data) {
			c.entries = append(append(c.entries[:i:i], c.entries[i+1:]...), e)
			b.mu.Unlock()
			return e.buf, nil
		}
	}
	b.mu.Unlock()
	g, err := b.upload(data, what, false)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c.entries = append(c.entries, tableEntry{key: key, data: append([]byte(nil), data...), buf: g})
	c.bytes += len(data)
	limit := c.limit
	if limit <= 0 {
		limit = tableBytes
	}
	for c.bytes > limit && len(c.entries) > tablesPerOp {
		old := c.entries[0]
		c.entries = c.entries[1:]
		c.bytes -= len(old.data)
		// Launches of the open batch may bind it: free it after the commit.
		b.open.after = append(b.open.after, old.buf)
	}
	return g, nil
}
