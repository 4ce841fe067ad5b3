// quants.h: block decoders shared by every function that reads weights. Each
// format is a struct with
//   dq16(w, s, b, chunk, gs, sbf16, out): elements [16*chunk, 16*chunk+16) of
//     one row starting at w (s, b: that row's MLX scales and biases);
//   dq1(w, s, b, e, gs, sbf16): element e (for row tails of the float formats).
// Layouts follow ggml (testdata/quant/README.md) and MLX affine packing. The
// products are ordered as ggml orders them, so the results are bit-exact.
//
// Loads: q4_K, q8_0, q6_K and the MLX codes are read with 16- or 32-bit loads
// (ld_u16, ld_u32), the other formats byte by byte. A block keeps the
// alignment of its tensor's first byte when its size is a multiple of it:
// q4_K (144 B) and MLX chunks (16 codes: 8 or 16 B of uint32 words) are
// 4-byte aligned, q8_0 (34 B) and q6_K (210 B) 2-byte aligned.
// The host guarantees the first byte (metal.Backend.Weight copies a tensor
// whose mapped bytes are not so aligned); the emulator checks every wide load.
#ifndef CLEF_QUANTS_H
#define CLEF_QUANTS_H

#define QARGS device const uchar *w, device const uchar *s, device const uchar *b

static inline float ld_f16(device const uchar *p) {
  return float(as_type<half>(ushort(ushort(p[0]) | (ushort(p[1]) << 8))));
}
static inline float ld_bf16(device const uchar *p) {
  return as_type<float>((uint(p[0]) | (uint(p[1]) << 8)) << 16);
}
static inline float ld_f32(device const uchar *p) {
  return as_type<float>(uint(p[0]) | (uint(p[1]) << 8) | (uint(p[2]) << 16) | (uint(p[3]) << 24));
}
static inline int ld_i8(device const uchar *p) { return int(p[0]) - (p[0] >= 128 ? 256 : 0); }

// ld_u16 and ld_u32 load a little-endian 16- or 32-bit word at p, which must
// be 2- or 4-byte aligned.
static inline uint ld_u16(device const uchar *p) {
#ifdef MSL_EMU
  msl::check_aligned(p, 2, "ld_u16");
#endif
  return uint(*((device const ushort *)p));
}
static inline uint ld_u32(device const uchar *p) {
#ifdef MSL_EMU
  msl::check_aligned(p, 4, "ld_u32");
#endif
  return *((device const uint *)p);
}
// f16_lo and f16_hi decode the f16 in the low or high half of a word.
static inline float f16_lo(uint u) { return float(as_type<half>(ushort(u & 0xffffu))); }
static inline float f16_hi(uint u) { return float(as_type<half>(ushort(u >> 16))); }
// i8_of returns the signed byte i (0 or 1) of a 16-bit word.
static inline int i8_of(uint u, int i) {
  const int v = int((u >> (8 * i)) & 255u);
  return v - (v >= 128 ? 256 : 0);
}

struct fmt_f32 {
  static inline float dq1(QARGS, int e, int gs, int sbf16) { return ld_f32(w + 4 * e); }
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    for (int j = 0; j < 16; j++) {
      o[j] = ld_f32(w + 4 * (16 * c + j));
    }
  }
};

struct fmt_f16 {
  static inline float dq1(QARGS, int e, int gs, int sbf16) { return ld_f16(w + 2 * e); }
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    for (int j = 0; j < 16; j++) {
      o[j] = ld_f16(w + 2 * (16 * c + j));
    }
  }
};

struct fmt_bf16 {
  static inline float dq1(QARGS, int e, int gs, int sbf16) { return ld_bf16(w + 2 * e); }
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    for (int j = 0; j < 16; j++) {
      o[j] = ld_bf16(w + 2 * (16 * c + j));
    }
  }
};

// q8_0: 32 elements, 34 bytes: d f16, qs int8[32].
struct fmt_q8_0 {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 34 * (c / 2); // 2-byte aligned
    const float d = f16_lo(ld_u16(blk));
    device const uchar *qs = blk + 2 + 16 * (c % 2);
    for (int j = 0; j < 8; j++) {
      const uint u = ld_u16(qs + 2 * j);
      o[2 * j] = d * float(i8_of(u, 0));
      o[2 * j + 1] = d * float(i8_of(u, 1));
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    device const uchar *blk = w + 34 * (e / 32);
    return ld_f16(blk) * float(ld_i8(blk + 2 + e % 32));
  }
};

// The legacy 32-element formats: q4_0 (d, qs[16]; q = nibble - 8), q4_1
// (d, m, qs[16]; y = d*q + m), q5_0 (d, qh u32, qs[16]; fifth bit from qh,
// q - 16), q5_1 (d, m, qh, qs[16]). Element j < 16 is the low nibble of qs[j],
// element j + 16 the high one; qh bit i is element i's fifth bit.
template <int BYTES, int HAS_MIN, int HAS_QH> struct fmt_legacy {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + BYTES * (c / 2);
    const int sub = c % 2;
    const float d = ld_f16(blk);
    const float m = HAS_MIN ? ld_f16(blk + 2) : 0.0f;
    device const uchar *qh = blk + 2 + 2 * HAS_MIN;
    device const uchar *qs = qh + 4 * HAS_QH;
    const uint hbits = HAS_QH ? (uint(qh[0]) | (uint(qh[1]) << 8) | (uint(qh[2]) << 16) | (uint(qh[3]) << 24)) : 0u;
    const int off = HAS_MIN ? 0 : (HAS_QH ? 16 : 8);
    for (int j = 0; j < 16; j++) {
      int q = (qs[j] >> (4 * sub)) & 15;
      if (HAS_QH) {
        q |= int((hbits >> (16 * sub + j)) & 1u) << 4;
      }
      q -= off;
      o[j] = HAS_MIN ? d * float(q) + m : d * float(q);
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};
typedef fmt_legacy<18, 0, 0> fmt_q4_0;
typedef fmt_legacy<20, 1, 0> fmt_q4_1;
typedef fmt_legacy<22, 0, 1> fmt_q5_0;
typedef fmt_legacy<24, 1, 1> fmt_q5_1;

// The 6-bit scale and min of sub-block j of a q4_K/q5_K block.
static inline void scale_min_k4(int j, device const uchar *q, thread float &sc, thread float &m) {
  if (j < 4) {
    sc = float(q[j] & 63);
    m = float(q[j + 4] & 63);
  } else {
    sc = float((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
    m = float((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// q4_K: 256 elements, 144 bytes: d, dmin f16, scales[12], qs[128]; 8
// sub-blocks of 32; qs[32c..32c+31] hold sub 2c (low nibbles) and 2c+1 (high).
struct fmt_q4_K {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 144 * (c / 16); // 4-byte aligned
    const int c16 = c % 16, sub = c16 / 2, l0 = 16 * (c16 % 2);
    const uint dd = ld_u32(blk);
    const float d = f16_lo(dd), dmin = f16_hi(dd);
    // scales[12] as three words; byte i of word k is scales[4k + i].
    const int sb = 8 * (sub % 4);
    const uint s0 = ld_u32(blk + 4) >> sb, s1 = ld_u32(blk + 8) >> sb, s2 = ld_u32(blk + 12) >> sb;
    float sc, m;
    if (sub < 4) {
      sc = float(s0 & 63u);
      m = float(s1 & 63u);
    } else {
      sc = float((s2 & 15u) | (((s0 & 255u) >> 6) << 4));
      m = float(((s2 & 255u) >> 4) | (((s1 & 255u) >> 6) << 4));
    }
    const float d1 = d * sc, m1 = dmin * m;
    device const uchar *qs = blk + 16 + 32 * (sub / 2) + l0;
    const int shift = 4 * (sub % 2);
    for (int k = 0; k < 4; k++) {
      const uint q = ld_u32(qs + 4 * k) >> shift;
      for (int i = 0; i < 4; i++) {
        o[4 * k + i] = d1 * float((q >> (8 * i)) & 15u) - m1;
      }
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};

// q5_K: 256 elements, 176 bytes: d, dmin, scales[12], qh[32], qs[128].
struct fmt_q5_K {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 176 * (c / 16);
    const int c16 = c % 16, sub = c16 / 2, l0 = 16 * (c16 % 2);
    const float d = ld_f16(blk), dmin = ld_f16(blk + 2);
    float sc, m;
    scale_min_k4(sub, blk + 4, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    device const uchar *qh = blk + 16 + l0;
    device const uchar *qs = blk + 48 + 32 * (sub / 2) + l0;
    const int shift = 4 * (sub % 2);
    for (int j = 0; j < 16; j++) {
      const int q = ((qs[j] >> shift) & 15) + 16 * ((qh[j] >> sub) & 1);
      o[j] = d1 * float(q) - m1;
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};

// q6_K: 256 elements, 210 bytes: ql[128], qh[64], scales int8[16], d.
struct fmt_q6_K {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 210 * (c / 16); // 2-byte aligned
    const int e0 = 16 * (c % 16);
    const int h = e0 / 128, r = e0 % 128, quarter = r / 32, l0 = r % 32;
    device const uchar *ql = blk + 64 * h + l0 + 32 * (quarter % 2);
    device const uchar *qh = blk + 128 + 32 * h + l0;
    const int lshift = 4 * (quarter / 2), hshift = 2 * quarter;
    const float d = f16_lo(ld_u16(blk + 208));
    const float d1 = d * float(ld_i8(blk + 192 + 8 * h + l0 / 16 + 2 * quarter));
    for (int j = 0; j < 8; j++) {
      const uint lo = ld_u16(ql + 2 * j) >> lshift, hi = ld_u16(qh + 2 * j) >> hshift;
      for (int i = 0; i < 2; i++) {
        const int q = int(((lo >> (8 * i)) & 15u) | (((hi >> (8 * i)) & 3u) << 4)) - 32;
        o[2 * j + i] = d1 * float(q);
      }
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};

// q3_K: 256 elements, 110 bytes: hmask[32], qs[64], scales[12], d. Group g of
// 16 elements (g = 8h + 2s + sub) reads qs[32h + 16sub + l] >> 2s.
struct fmt_q3_K {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 110 * (c / 16);
    const int g = c % 16, h = g / 8, sh = (g % 8) / 2, sub = g % 2;
    device const uchar *sc = blk + 96;
    const int lo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
    const int scale = lo | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
    const float d1 = ld_f16(blk + 108) * float(scale - 32);
    device const uchar *qs = blk + 32 + 32 * h + 16 * sub;
    device const uchar *hm = blk + 16 * sub;
    const int bit = 4 * h + sh;
    for (int j = 0; j < 16; j++) {
      const int q = ((qs[j] >> (2 * sh)) & 3) - (((hm[j] >> bit) & 1) ? 0 : 4);
      o[j] = d1 * float(q);
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};

// q2_K: 256 elements, 84 bytes: scales[16], qs[64], d, dmin.
struct fmt_q2_K {
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    device const uchar *blk = w + 84 * (c / 16);
    const int g = c % 16, h = g / 8, sh = (g % 8) / 2, sub = g % 2;
    const int sc = blk[g];
    const float d1 = ld_f16(blk + 80) * float(sc & 15);
    const float m1 = ld_f16(blk + 82) * float(sc >> 4);
    device const uchar *qs = blk + 16 + 32 * h + 16 * sub;
    for (int j = 0; j < 16; j++) {
      o[j] = d1 * float((qs[j] >> (2 * sh)) & 3) - m1;
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};

// MLX affine, BITS = 4 or 8: codes packed LSB-first in little-endian uint32
// words along the row; group g of gs elements has scale s[g] and bias b[g]
// (f16, or bf16 when sbf16): y = scale * q + bias. gs is a multiple of 16.
template <int BITS> struct fmt_mlx {
  static inline float sb(device const uchar *p, int g, int sbf16) { return sbf16 ? ld_bf16(p + 2 * g) : ld_f16(p + 2 * g); }
  static inline void dq16(QARGS, int c, int gs, int sbf16, thread float *o) {
    const int e0 = 16 * c, g = e0 / gs;
    const float scale = sb(s, g, sbf16), bias = sb(b, g, sbf16);
    device const uchar *p = w + e0 * BITS / 8; // 4-byte aligned: whole words
    const int per = 32 / BITS; // codes per word
    for (int k = 0; k < 16 / per; k++) {
      const uint u = ld_u32(p + 4 * k);
      for (int i = 0; i < per; i++) {
        o[per * k + i] = scale * float((u >> (BITS * i)) & ((1u << BITS) - 1u)) + bias;
      }
    }
  }
  static inline float dq1(QARGS, int e, int gs, int sbf16) {
    float o[16];
    dq16(w, s, b, e / 16, gs, sbf16, o);
    return o[e % 16];
  }
};
typedef fmt_mlx<4> fmt_mlx4;
typedef fmt_mlx<8> fmt_mlx8;

#endif // CLEF_QUANTS_H
