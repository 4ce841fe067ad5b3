// t8w.h: the weight formats of the int8 tensor path (tensor_q8.metal
// mul_mm_t8_<fmt>, tensor_moe.metal moe_gu_t8_<fmt> and moe_down_t8_<fmt>)
// and the pieces both files share: the staging of a super-block's integer
// codes and scales into threadgroup memory, the staging of a q8_K token's
// block header, and the super-block's float step. Each format is a struct
// (t8w_q4_K, t8w_q6_K) with
//   BLOCK, SUB, NSUB, MINS: bytes per super-block of 256, values per scale
//     (the int8 matmul2d's k), scales per super-block (256 / SUB), and
//     whether the format has minimums (the float step's second term);
//   codes64(blk, c, live, dst): values 64c..64c+63 of the block as int8
//     codes, k in order, 16 words at dst (zeros for a dead row), such that
//     value = d·sc[sub]·code − dmin·m[sub];
//   meta(blk, live, wd, sc, mn): d, dmin at wd[0], wd[1] (dmin unwritten
//     without minimums), the NSUB scales as bytes at sc (NSUB / 4 words:
//     int8 0..63 for q4_K, -128..127 for q6_K; read back as int8) and, with
//     minimums, the 8 minimums as bytes at mn (2 words); zeros for a dead
//     row.
// The codes times q8_K's codes are the integers of quant.VecDot's dot
// product of the format with q8_K (quant.KBlock: Q, Scale, Min), summed
// per sub-block by the int8 matmul2d.
#ifndef CLEF_T8W_H
#define CLEF_T8W_H

#include "quants.h"
#include "q8k.h"

// q4_K: 144 bytes: d, dmin (f16), scales[12] (8 6-bit scales and 8 6-bit
// minimums), qs[128]; sub-blocks of 32, codes 0..15: qs[32c..32c+31] hold
// sub-block 2c (low nibbles) and 2c+1 (high). 4-byte aligned (quants.h).
struct t8w_q4_K {
  enum { BLOCK = 144, SUB = 32, NSUB = 8, MINS = 1 };
  static inline void codes64(device const uchar *blk, int c, bool live, threadgroup int8_t *dst) {
    threadgroup uint *o = (threadgroup uint *)dst;
    for (int j = 0; j < 8; j++) {
      const uint q = live ? ld_u32(blk + 16 + 32 * c + 4 * j) : 0u;
      o[j] = q & 0x0f0f0f0fu;
      o[8 + j] = (q >> 4) & 0x0f0f0f0fu;
    }
  }
  static inline void meta(device const uchar *blk, bool live, threadgroup float *wd, threadgroup uint *sc,
                          threadgroup uint *mn) {
    if (!live) {
      wd[0] = wd[1] = 0.0f;
      sc[0] = sc[1] = mn[0] = mn[1] = 0u;
      return;
    }
    const uint dd = ld_u32(blk), s0 = ld_u32(blk + 4), s1 = ld_u32(blk + 8), s2 = ld_u32(blk + 12);
    wd[0] = f16_lo(dd);
    wd[1] = f16_hi(dd);
    // j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: the low 4 bits from
    // s[j+4], the high 2 from the top of s[j-4] (sc) or s[j] (m).
    sc[0] = s0 & 0x3f3f3f3fu;
    mn[0] = s1 & 0x3f3f3f3fu;
    sc[1] = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    mn[1] = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
  }
};

// ld_w16 loads a little-endian word at p, 2-byte aligned (q6_K's 210-byte
// blocks keep only that): two 16-bit loads.
static inline uint ld_w16(device const uchar *p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }

// q6_K: 210 bytes: ql[128], qh[64], int8 scales[16], d (f16); sub-blocks of
// 16, value = d·scale[sub]·(code − 32) with 6-bit codes. Half h (values
// 128h..128h+127) takes ql[64h..64h+63] and qh[32h..32h+31]; its quarter q
// (32 values, l = 0..31) is the low (q < 2) or high nibble of ql[64h + 32(q
// % 2) + l] with bits 2q, 2q+1 of qh[32h + l] above. Staged signed, code − 32
// in [-32, 31] (no minimum term): per byte (u + 0x60) ^ 0x80 is u − 32 mod
// 256 for u in 0..63, and no byte carries into the next (u + 0x60 <= 0x9f).
struct t8w_q6_K {
  enum { BLOCK = 210, SUB = 16, NSUB = 16, MINS = 0 };
  static inline void codes64(device const uchar *blk, int c, bool live, threadgroup int8_t *dst) {
    threadgroup uint *o = (threadgroup uint *)dst;
    // Chunk c: half c / 2, quarters 2 (c % 2) and 2 (c % 2) + 1: ql shift
    // 4 (c % 2) for both, qh shifts 4 (c % 2) and 4 (c % 2) + 2.
    device const uchar *ql = blk + 64 * (c / 2), *qh = blk + 128 + 32 * (c / 2);
    const int s = 4 * (c % 2);
    for (int j = 0; j < 8; j++) {
      if (!live) {
        o[j] = o[8 + j] = 0u;
        continue;
      }
      const uint h = ld_w16(qh + 4 * j), l0 = ld_w16(ql + 4 * j), l1 = ld_w16(ql + 32 + 4 * j);
      o[j] = ((((l0 >> s) & 0x0f0f0f0fu) | (((h >> s) & 0x03030303u) << 4)) + 0x60606060u) ^ 0x80808080u;
      o[8 + j] = ((((l1 >> s) & 0x0f0f0f0fu) | (((h >> (s + 2)) & 0x03030303u) << 4)) + 0x60606060u) ^ 0x80808080u;
    }
  }
  static inline void meta(device const uchar *blk, bool live, threadgroup float *wd, threadgroup uint *sc,
                          threadgroup uint *mn) {
    wd[0] = live ? f16_lo(ld_u16(blk + 208)) : 0.0f;
    for (int j = 0; j < 4; j++) {
      sc[j] = live ? ld_w16(blk + 192 + 4 * j) : 0u;
    }
  }
};

// t8_stage_xmeta stores token t's d_x (xd[t]) and, for a format with
// minimums, the 8 sums of its codes per 32 (xbs[8t..8t+7]: q8_K's bsums
// are per 16, added in pairs) of the q8_K block blk (zeros for a dead
// token).
template <typename F>
static inline void t8_stage_xmeta(device const uchar *blk, bool live, int t, threadgroup float *xd, threadgroup short *xbs) {
  xd[t] = live ? as_type<float>(ld_u32(blk)) : 0.0f;
  if (!F::MINS) {
    return;
  }
  for (int j = 0; j < 8; j++) {
    const uint u = live ? ld_u32(blk + 260 + 4 * j) : 0u; // bsums[2j] | bsums[2j+1] << 16
    xbs[8 * t + j] = short(int(as_type<short>(ushort(u & 0xffffu))) + int(as_type<short>(ushort(u >> 16))));
  }
}

// t8_fstep is the super-block's float step of element i of one product, as
// quant.VecDot writes it: f (float bits) += d_x·d·float(a) − d_x·dmin·
// float(Σ_j m_j·bsum_j), then a = 0. wd holds the row's d, dmin; mb its 8
// minimums (bytes, 4-byte aligned); bs the token's 8 sums per 32 (8-byte
// aligned): two uchar4 and two short4 loads. Without minimums (q6_K)
// quant's second term is d_x·0·float(0) = ±0 and p − (±0) is p or, for p =
// −0, +0, added to a sum that is never −0 (it starts at +0 and round to
// nearest gives −0 only for −0 + −0): f += d_x·d·float(a) is the same bits
// for a finite d_x (an infinite one makes quant's term NaN, this sum ±inf).
template <typename F, typename C>
static inline void t8_fstep(thread C &a, thread C &f, ushort i, float dxv, threadgroup const float *wd,
                            threadgroup const uchar *mb, threadgroup const short *bs) {
  const float p = dxv * wd[0] * float(a[i]);
  if (F::MINS) {
    threadgroup const uchar4 *m4 = (threadgroup const uchar4 *)mb;
    threadgroup const short4 *b4 = (threadgroup const short4 *)bs;
    const int4 pr = int4(m4[0]) * int4(b4[0]) + int4(m4[1]) * int4(b4[1]);
    const int sm = pr.x + pr.y + pr.z + pr.w;
    f[i] = as_type<int>(as_type<float>(f[i]) + (p - dxv * wd[1] * float(sm)));
  } else {
    f[i] = as_type<int>(as_type<float>(f[i]) + p);
  }
  a[i] = 0;
}

#endif // CLEF_T8W_H
