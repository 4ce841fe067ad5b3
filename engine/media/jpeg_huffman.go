package media

import "errors"

// Entropy decoding of JPEG scans: Huffman tables (T.81 annex C and F.2.2.3),
// the bit reader over entropy-coded segments (byte stuffing and markers,
// F.2.2.5), and the per-block decoding of sequential scans (F.2.2) and of
// the four kinds of progressive scans (G.1.2).

var errJPEGBadCode = errors.New("jpeg: corrupt data (invalid Huffman code)")

// jpegLookBits is how many bits the first-level lookup table decodes.
const jpegLookBits = 9

// jpegHuff is a decoding table built from a DHT segment.
type jpegHuff struct {
	present bool
	bad     bool // the code lengths overflow (T.81 C: no code may be all ones)
	maxSym  byte
	// lut maps the next jpegLookBits bits to length<<8 | symbol for codes
	// of at most jpegLookBits bits; 0 means the code is longer.
	lut     [1 << jpegLookBits]uint16
	maxcode [17]int32 // largest code of each length, -1 where there is none
	valoff  [17]int32 // symbol index of a code of length l is code + valoff[l]
	vals    [256]byte
}

// build makes the canonical code (T.81 C.2) for counts[l] codes of each
// length l and the given symbols.
func (h *jpegHuff) build(counts *[17]int, syms []byte) {
	*h = jpegHuff{present: true}
	copy(h.vals[:], syms)
	for _, s := range syms {
		h.maxSym = max(h.maxSym, s)
	}
	code, k := 0, 0
	for l := 1; l <= 16; l++ {
		n := counts[l]
		h.maxcode[l] = -1
		h.valoff[l] = int32(k - code)
		if n > 0 {
			if code+n >= 1<<l {
				h.bad = true
				return
			}
			h.maxcode[l] = int32(code + n - 1)
			if l <= jpegLookBits {
				shift := jpegLookBits - l
				for i := 0; i < n; i++ {
					e := uint16(l)<<8 | uint16(syms[k+i])
					first := (code + i) << shift
					for j := 0; j < 1<<shift; j++ {
						h.lut[first+j] = e
					}
				}
			}
		}
		code += n
		k += n
		code <<= 1
	}
}

// check reports a table unusable for decoding: overflowing code lengths,
// or, for a DC table, a difference category above 15.
func (h *jpegHuff) check(dc bool) error {
	if h.bad {
		return errors.New("jpeg: bad Huffman table (code lengths overflow)")
	}
	if dc && h.maxSym > 15 {
		return errors.New("jpeg: bad DC Huffman table (category above 15)")
	}
	return nil
}

// jpegBits reads the bits of an entropy-coded segment. When it meets a
// marker (or the end of the data) it stops there and supplies zero bits,
// counting them in pad; the decoder finds out whether any were used by
// comparing pad with n after each MCU.
type jpegBits struct {
	data   []byte
	pos    int
	acc    uint64 // the low n bits are unread, most significant first
	n      uint32
	pad    uint32 // zero bits appended after the data stopped
	marker bool   // stopped in front of a marker; pos is on its last 0xFF
	eof    bool   // the data ended without a marker
}

// fill tops the accumulator up to more than 56 bits, removing stuffed
// zero bytes after 0xFF.
func (b *jpegBits) fill() {
	for b.n <= 56 {
		if b.pos < len(b.data) {
			if c := b.data[b.pos]; c != 0xFF {
				b.pos++
				b.acc = b.acc<<8 | uint64(c)
				b.n += 8
				continue
			}
		}
		b.fillSpecial()
	}
}

// fillSpecial adds the next byte when it is not a plain data byte: a
// stuffed 0xFF, or zero bits once a marker or the end of the data is met.
func (b *jpegBits) fillSpecial() {
	data := b.data
	if !b.marker && !b.eof {
		if b.pos >= len(data) {
			b.eof = true
		} else {
			// data[b.pos] is 0xFF: fill bytes, then 0x00 (a stuffed data
			// byte) or a marker code.
			p := b.pos + 1
			for p < len(data) && data[p] == 0xFF {
				p++
			}
			switch {
			case p >= len(data):
				b.pos = p
				b.eof = true
			case data[p] == 0:
				b.pos = p + 1
				b.acc = b.acc<<8 | 0xFF
				b.n += 8
				return
			default:
				b.pos = p - 1
				b.marker = true
			}
		}
	}
	b.acc <<= 8
	b.n += 8
	b.pad += 8
}

// bits consumes s bits (s <= n) and returns them as an unsigned value.
func (b *jpegBits) bits(s uint32) int32 {
	b.n -= s
	return int32(b.acc>>b.n) & (1<<s - 1)
}

// huff decodes one Huffman-coded symbol; the caller guarantees n >= 16.
// Codes of up to jpegLookBits bits take one table lookup.
func (b *jpegBits) huff(h *jpegHuff) (byte, bool) {
	if e := h.lut[(b.acc>>(b.n-jpegLookBits))&(1<<jpegLookBits-1)]; e != 0 {
		b.n -= uint32(e >> 8)
		return byte(e), true
	}
	return b.huffLong(h)
}

// huffLong decodes a code longer than jpegLookBits bits (T.81 F.2.2.3).
// It stays out of line so that huff itself inlines.
//
//go:noinline
func (b *jpegBits) huffLong(h *jpegHuff) (byte, bool) {
	for l := uint32(jpegLookBits + 1); l <= 16; l++ {
		code := int32(b.acc>>(b.n-l)) & (1<<l - 1)
		if code <= h.maxcode[l] {
			b.n -= l
			return h.vals[uint8(code+h.valoff[l])], true
		}
	}
	return 0, false
}

// extend turns the s-bit magnitude field v into a signed value (T.81
// F.2.2.1, EXTEND).
func extend(v int32, s uint32) int32 {
	if s == 0 {
		return 0
	}
	if v < 1<<(s-1) {
		v += -1<<s + 1
	}
	return v
}

// decodeBlock decodes one block of a sequential scan (T.81 F.2.2): the DC
// difference, added to the predictor, then the run-length coded AC
// coefficients, written in natural order. Zero coefficients are not
// written; the caller clears the block.
func (b *jpegBits) decodeBlock(blk *[64]int16, dc, ac *jpegHuff, pred *int32) error {
	if b.n < 32 {
		b.fill()
	}
	s, ok := b.huff(dc)
	if !ok {
		return errJPEGBadCode
	}
	*pred += extend(b.bits(uint32(s)), uint32(s))
	blk[0] = int16(*pred)
	for k := 1; k < 64; k++ {
		if b.n < 32 {
			b.fill()
		}
		// b.huff(ac), written out: this loop is the decoder's hottest.
		var rs byte
		if e := ac.lut[(b.acc>>(b.n-jpegLookBits))&(1<<jpegLookBits-1)]; e != 0 {
			b.n -= uint32(e >> 8)
			rs = byte(e)
		} else if rs, ok = b.huffLong(ac); !ok {
			return errJPEGBadCode
		}
		r, s := int(rs>>4), uint32(rs&15)
		if s != 0 {
			k += r
			blk[jpegNatural[k]] = int16(extend(b.bits(s), s))
		} else {
			if r != 15 {
				break // end of block
			}
			k += 15 // sixteen zeros
		}
	}
	return nil
}

// decodeDCFirst decodes the first DC scan of a progressive frame (G.1.2.1):
// the DC value, scaled by 2^al.
func (b *jpegBits) decodeDCFirst(blk *[64]int16, dc *jpegHuff, pred *int32, al int) error {
	if b.n < 32 {
		b.fill()
	}
	s, ok := b.huff(dc)
	if !ok {
		return errJPEGBadCode
	}
	*pred += extend(b.bits(uint32(s)), uint32(s))
	blk[0] = int16(*pred << al)
	return nil
}

// decodeDCRefine appends one bit of DC precision (G.1.2.1).
func (b *jpegBits) decodeDCRefine(blk *[64]int16, al int) {
	if b.n < 1 {
		b.fill()
	}
	if b.bits(1) != 0 {
		blk[0] |= 1 << al
	}
}

// decodeACFirst decodes the first scan of the AC band ss..se (G.1.2.2),
// values scaled by 2^al, with end-of-band runs spanning blocks.
func (b *jpegBits) decodeACFirst(blk *[64]int16, ac *jpegHuff, ss, se, al int, eobrun *int32) error {
	if *eobrun > 0 {
		*eobrun--
		return nil
	}
	for k := ss; k <= se; k++ {
		if b.n < 32 {
			b.fill()
		}
		rs, ok := b.huff(ac)
		if !ok {
			return errJPEGBadCode
		}
		r, s := int(rs>>4), uint32(rs&15)
		if s != 0 {
			k += r
			blk[jpegNatural[k]] = int16(extend(b.bits(s), s) << al)
			continue
		}
		if r != 15 {
			// EOBr: this block and 2^r - 1 + (r bits) more end here.
			run := int32(1) << r
			if r != 0 {
				run += b.bits(uint32(r))
			}
			*eobrun = run - 1
			break
		}
		k += 15
	}
	return nil
}

// decodeACRefine decodes a successive-approximation refinement scan of the
// AC band ss..se (G.1.2.3): coefficients that become nonzero get ±2^al, and
// each already-nonzero coefficient passed over gets a correction bit.
func (b *jpegBits) decodeACRefine(blk *[64]int16, ac *jpegHuff, ss, se, al int, eobrun *int32) error {
	p1 := int16(1) << al
	m1 := int16(-1) << al
	k := ss
	if *eobrun == 0 {
		for ; k <= se; k++ {
			if b.n < 32 {
				b.fill()
			}
			rs, ok := b.huff(ac)
			if !ok {
				return errJPEGBadCode
			}
			r, s := int(rs>>4), rs&15
			var v int16
			if s != 0 {
				// The size should be 1; libjpeg warns and reads one bit anyway.
				if b.bits(1) != 0 {
					v = p1
				} else {
					v = m1
				}
			} else if r != 15 {
				*eobrun = int32(1) << r
				if r != 0 {
					*eobrun += b.bits(uint32(r))
				}
				break
			}
			// Pass over already-nonzero coefficients (refining them) and r
			// zero ones; the next zero one receives v.
			for k <= se {
				z := &blk[jpegNatural[k]]
				if *z != 0 {
					if b.n < 1 {
						b.fill()
					}
					if b.bits(1) != 0 && *z&p1 == 0 {
						if *z >= 0 {
							*z += p1
						} else {
							*z += m1
						}
					}
				} else {
					if r == 0 {
						break
					}
					r--
				}
				k++
			}
			if v != 0 {
				blk[jpegNatural[k]] = v
			}
		}
	}
	if *eobrun > 0 {
		// Inside an end-of-band run: only correction bits for the nonzero
		// coefficients left in the band.
		for ; k <= se; k++ {
			z := &blk[jpegNatural[k]]
			if *z != 0 {
				if b.n < 1 {
					b.fill()
				}
				if b.bits(1) != 0 && *z&p1 == 0 {
					if *z >= 0 {
						*z += p1
					} else {
						*z += m1
					}
				}
			}
		}
		*eobrun--
	}
	return nil
}
