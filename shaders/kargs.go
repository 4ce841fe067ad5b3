package shaders

import (
	"structs"
	"unsafe"
)

// The Go mirror of kargs.h: one struct per C struct, field by field,
// in the same order with the same sizes (int -> int32, ulong -> uint64,
// float -> float32). TestKargsMirror compiles kargs.h with clang and checks
// every size and offset against these.

// KargsEltwise mirrors kargs_eltwise.
type KargsEltwise struct {
	_     structs.HostLayout
	N     int32
	Alpha float32
	Cols  int32
	_     int32
}

// KargsNorm mirrors kargs_norm.
type KargsNorm struct {
	_       structs.HostLayout
	Rows    int32
	Cols    int32
	XStride int32
	YStride int32
	Eps     float32
	HasBias int32
}

// KargsRope mirrors kargs_rope.
type KargsRope struct {
	_       structs.HostLayout
	Tokens  int32
	Heads   int32
	HeadDim int32
	XStride int32
	YStride int32
	_       int32
}

// KargsAddRows mirrors kargs_add_rows.
type KargsAddRows struct {
	_    structs.HostLayout
	Rows int32
	Cols int32
	NSrc int32
	_    int32
}

// KargsGetRows mirrors kargs_get_rows.
type KargsGetRows struct {
	_         structs.HostLayout
	NIDs      int32
	Cols      int32
	RowBytes  uint64
	SRowBytes uint64
	GroupSize int32
	ScaleBF16 int32
	NRows     int32
	_         int32
}

// KargsGatherBlend mirrors kargs_gather_blend.
type KargsGatherBlend struct {
	_        structs.HostLayout
	NOut     int32
	Cols     int32
	K        int32
	NRows    int32
	RowBytes uint64
}

// KargsIm2Col mirrors kargs_im2col.
type KargsIm2Col struct {
	_  structs.HostLayout
	N  int32
	H  int32
	W  int32
	C  int32
	KH int32
	KW int32
	SH int32
	SW int32
	PH int32
	PW int32
	OH int32
	OW int32
}

// KargsMatmul mirrors kargs_matmul.
type KargsMatmul struct {
	_            structs.HostLayout
	M            int32
	N            int32
	K            int32
	XStride      int32
	YStride      int32
	GroupSize    int32
	RowBytes     uint64
	SRowBytes    uint64
	ExpertBytes  uint64
	SExpertBytes uint64
	ScaleBF16    int32
	NExpert      int32
	TopK         int32
	XPerSlot     int32
	Tiles        int32
	_            int32
}

// KargsMoe mirrors kargs_moe.
type KargsMoe struct {
	_           structs.HostLayout
	Tokens      int32
	NExpert     int32
	TopK        int32
	NormTopK    int32
	Cols        int32
	AddResidual int32
}

// KargsAttn mirrors kargs_attn.
type KargsAttn struct {
	_       structs.HostLayout
	L       int32
	Lk      int32
	NHead   int32
	NKV     int32
	HeadDim int32
	Causal  int32
	QStride int32
	KStride int32
	VStride int32
	OStride int32
	Scale   float32
	Ranged  int32
}

// KargsMoeTiles mirrors kargs_moe_tiles.
type KargsMoeTiles struct {
	_        structs.HostLayout
	NExpert  int32
	RowsGu   int32
	RowsDown int32
	_        int32
}

// KargsQ8K mirrors kargs_q8k.
type KargsQ8K struct {
	_       structs.HostLayout
	Rows    int32
	Cols    int32
	XStride int32
	YStride int32
}

// KargsAttnLimbs mirrors kargs_attn_limbs.
type KargsAttnLimbs struct {
	_       structs.HostLayout
	Rows    int32
	Heads   int32
	XStride int32
	KOrder  int32
}

// Kargs is any of the argument structs.
type Kargs interface {
	KargsEltwise | KargsNorm | KargsRope | KargsAddRows | KargsGetRows | KargsGatherBlend | KargsIm2Col | KargsMatmul | KargsMoe |
		KargsAttn | KargsMoeTiles | KargsQ8K | KargsAttnLimbs
}

// Bytes returns the in-memory bytes of a, as setBytes sends them (the
// structs hold no pointers; both Apple silicon and the test hosts are
// little-endian).
func Bytes[T Kargs](a *T) []byte {
	b := unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
	return append([]byte(nil), b...)
}
