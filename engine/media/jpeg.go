package media

// JPEG decoding as the reference makes it: Pillow's Image.open(...).convert("RGB")
// over libjpeg-turbo with its default settings (accurate integer IDCT,
// "fancy" triangle-filter chroma upsampling, integer colour conversion), so
// that a decode here is byte-identical to the reference's.
//
// The decoder follows ITU T.81: sequential (baseline and extended, 8-bit)
// and progressive Huffman-coded frames, restart intervals, any sampling
// factors from 1 to 4 whose ratios are whole numbers, and 1, 3 or 4
// components. The files are laid out in pipeline order: this file parses
// markers and drives the scans; jpeg_huffman.go decodes entropy-coded data;
// jpeg_smooth.go re-estimates coefficients of progressive files that stop
// early (libjpeg's block smoothing); jpeg_idct.go turns coefficient blocks
// into samples; jpeg_color.go upsamples chroma and converts to RGB.
//
// Damaged input follows libjpeg where its behaviour is an image: garbage
// between markers is skipped; a marker met inside entropy-coded data ends
// that segment early (the MCU in progress decodes with zero bits, the rest
// of the restart interval stays zero); wrong restart markers are
// resynchronised as jpeg_resync_to_restart does; out-of-range coefficients
// go through the IDCT as libjpeg-turbo's x86 SIMD code computes it. Where
// libjpeg would wait for more bytes (the data ends before the image does)
// Pillow reports a truncated file, and so do we. An undecodable Huffman
// code is an error here (libjpeg substitutes zero and warns).

import (
	"errors"
	"fmt"
)

const (
	// jpegMaxDimension is libjpeg's JPEG_MAX_DIMENSION: larger frames are
	// refused before any decoding.
	jpegMaxDimension = 65500
	// jpegMaxPixels is Pillow's decompression-bomb error threshold
	// (2 × Image.MAX_IMAGE_PIXELS): the reference refuses larger images.
	jpegMaxPixels = 2 * 89478485
	// jpegMaxScans bounds the scans of one image so that a stream of tiny
	// scans over a large frame cannot keep the decoder busy for long; real
	// progressive files use a few dozen at most.
	jpegMaxScans = 1000
	// jpegMaxBlocksInMCU is libjpeg's D_MAX_BLOCKS_IN_MCU (T.81 B.2.3).
	jpegMaxBlocksInMCU = 10
)

var (
	// errJPEGUnsupported marks valid JPEG features this decoder does not
	// implement (arithmetic coding, 12-bit samples, lossless and
	// hierarchical frames).
	errJPEGUnsupported = errors.New("jpeg: unsupported")
	// errJPEGTruncated reports data that ends before the image does.
	errJPEGTruncated = errors.New("jpeg: image file is truncated")
)

// decodeJPEG decodes a JPEG file to 8-bit RGB exactly as the reference does.
func decodeJPEG(data []byte) (*Image, error) {
	d := &jpegDecoder{data: data}
	if err := d.decode(); err != nil {
		return nil, err
	}
	return d.toRGB()
}

// jpegSize reads the markers up to the frame header and returns the
// image's dimensions without decoding any pixels.
func jpegSize(data []byte) (width, height int, err error) {
	d := &jpegDecoder{data: data}
	if err := d.readHeaders(true); err != nil {
		return 0, 0, err
	}
	return d.width, d.height, nil
}

// Marker codes (the byte after 0xFF), T.81 table B.1.
const (
	mSOF0 = 0xC0 // baseline
	mSOF1 = 0xC1 // extended sequential, Huffman
	mSOF2 = 0xC2 // progressive, Huffman
	mDHT  = 0xC4
	mJPG  = 0xC8
	mDAC  = 0xCC
	mRST0 = 0xD0
	mRST7 = 0xD7
	mSOI  = 0xD8
	mEOI  = 0xD9
	mSOS  = 0xDA
	mDQT  = 0xDB
	mDNL  = 0xDC
	mDRI  = 0xDD
	mAPP0 = 0xE0
	mAPPE = 0xEE
	mAPPF = 0xEF
	mCOM  = 0xFE
	mTEM  = 0x01
)

// jpegColor is the colour space of the coded components, chosen the way
// libjpeg guesses it from the component count and the JFIF/Adobe markers.
type jpegColor int

const (
	jpegGray jpegColor = iota
	jpegYCbCr
	jpegRGB
	jpegCMYK
	jpegYCCK
)

// jpegComponent is one colour component of the frame.
type jpegComponent struct {
	id     byte
	h, v   int  // sampling factors, 1..4
	tq     byte // quantization table selector
	td, ta byte // DC and AC Huffman table selectors of the current scan

	quant   *[64]int32 // dequantization multipliers, natural order; latched at the component's first scan
	bw, bh  int        // blocks per row and column, padded to whole MCUs
	wBlocks int        // blocks per row actually covering the component
	hBlocks int        // block rows actually covering the component
	dw, dh  int        // component size in samples (libjpeg's downsampled_width/height)

	coef []int16 // multi-scan frames: bw*bh blocks of 64 coefficients, natural order
	pix  []byte  // samples, stride bw*8, bh*8 rows
	pred int32   // DC predictor of the current scan

	// Progressive frames: the precision (Al) each zigzag coefficient is
	// known to, -1 if no scan covered it, and the first ten as they were
	// before the component's latest scan (for block smoothing).
	coefBits [64]int8
	prevBits [10]int8
}

// jpegDecoder holds the state of one decode.
type jpegDecoder struct {
	data []byte
	pos  int

	sawSOF      bool
	progressive bool
	width       int
	height      int
	comps       []jpegComponent
	hmax, vmax  int
	mcusX       int // MCUs per row of an interleaved scan
	mcusY       int // MCU rows of an interleaved scan

	qt      [4][64]uint16 // natural order
	qtSet   [4]bool
	dcTab   [4]jpegHuff
	acTab   [4]jpegHuff
	restart int // restart interval in MCUs, 0 for none

	jfif           bool
	adobe          bool
	adobeTransform byte
	color          jpegColor

	scans       int
	multiScan   bool // coefficients are kept until EOI (progressive or non-interleaved)
	br          jpegBits
	eobrun      int32
	lastGoodRow int // iMCU row of the last MCU the latest scan had data for
}

// decode runs the whole stream: headers, every scan, and (for multi-scan
// frames) the final inverse DCT, leaving samples in each component's pix.
func (d *jpegDecoder) decode() error {
	if err := d.readHeaders(false); err != nil {
		return err
	}
	// readHeaders stopped at the first SOS: set up the frame and decode.
	if err := d.setupFrame(); err != nil {
		return err
	}
	for {
		if err := d.readScan(); err != nil {
			return err
		}
		if !d.multiScan {
			// A single interleaved sequential scan holds the whole image;
			// libjpeg (and so Pillow) stops reading once it is decoded.
			return nil
		}
		done, err := d.readBetweenScans()
		if err != nil {
			return err
		}
		if done {
			break
		}
		if d.scans >= jpegMaxScans {
			return fmt.Errorf("jpeg: more than %d scans", jpegMaxScans)
		}
	}
	d.finishCoefficients()
	return nil
}

// readHeaders checks the SOI marker and processes marker segments until the
// first SOS (left unread, with d.pos after its marker code) or, when
// stopAtSOF is set, until the frame header has been read.
func (d *jpegDecoder) readHeaders(stopAtSOF bool) error {
	if len(d.data) < 2 || d.data[0] != 0xFF || d.data[1] != mSOI {
		return errors.New("jpeg: not a JPEG file (no SOI marker)")
	}
	d.pos = 2
	for {
		m, err := d.nextMarker()
		if err != nil {
			return err
		}
		switch {
		case m == mSOS:
			if !d.sawSOF {
				return errors.New("jpeg: SOS marker before any frame header")
			}
			return nil
		case m == mEOI:
			return errors.New("jpeg: no image in the file (EOI before any scan)")
		case m == mSOI:
			return errors.New("jpeg: duplicate SOI marker")
		case m >= mSOF0 && m <= 0xCF && m != mDHT && m != mDAC:
			if err := d.readSOF(m); err != nil {
				return err
			}
			if stopAtSOF {
				return nil
			}
		case m == mAPP0 || m == mAPPE:
			if err := d.readAPP(m); err != nil {
				return err
			}
		default:
			if err := d.readTableOrSkip(m); err != nil {
				return err
			}
		}
	}
}

// readBetweenScans processes the markers that follow a scan of a multi-scan
// frame. It reports done at EOI and otherwise stops after the next SOS
// marker code.
func (d *jpegDecoder) readBetweenScans() (done bool, err error) {
	for {
		m, err := d.nextMarker()
		if err != nil {
			return false, err
		}
		switch {
		case m == mSOS:
			return false, nil
		case m == mEOI:
			return true, nil
		case m == mSOI:
			return false, errors.New("jpeg: duplicate SOI marker")
		case m >= mSOF0 && m <= 0xCF && m != mDHT && m != mDAC:
			return false, errors.New("jpeg: duplicate frame header (SOF marker)")
		default:
			if err := d.readTableOrSkip(m); err != nil {
				return false, err
			}
		}
	}
}

// readTableOrSkip handles the markers allowed anywhere before a scan:
// tables, restart interval, application data, comments and the few
// parameterless or ignored ones. Anything else is refused, as libjpeg does.
func (d *jpegDecoder) readTableOrSkip(m byte) error {
	switch {
	case m == mDHT:
		return d.readDHT()
	case m == mDQT:
		return d.readDQT()
	case m == mDRI:
		return d.readDRI()
	case m == mDAC, m == mDNL, m == mCOM, m >= mAPP0 && m <= mAPPF:
		_, err := d.segment(fmt.Sprintf("marker 0x%02X", m))
		return err
	case m >= mRST0 && m <= mRST7, m == mTEM:
		return nil // parameterless; meaningless outside a scan
	}
	return fmt.Errorf("jpeg: unknown or unexpected marker 0xFF%02X", m)
}

// nextMarker skips to the next marker the way libjpeg does (stray bytes,
// 0xFF fill bytes and stuffed 0xFF00 pairs are passed over) and returns its
// code, with d.pos just after it.
func (d *jpegDecoder) nextMarker() (byte, error) {
	data := d.data
	p := d.pos
	for {
		for p < len(data) && data[p] != 0xFF {
			p++
		}
		for p < len(data) && data[p] == 0xFF {
			p++
		}
		if p >= len(data) {
			d.pos = p
			return 0, fmt.Errorf("%w (no marker before the end of data)", errJPEGTruncated)
		}
		c := data[p]
		p++
		if c != 0 {
			d.pos = p
			return c, nil
		}
	}
}

// segment returns the payload of the marker segment at d.pos (after its
// two length bytes) and advances past it.
func (d *jpegDecoder) segment(what string) ([]byte, error) {
	if d.pos+2 > len(d.data) {
		return nil, fmt.Errorf("%w (inside %s)", errJPEGTruncated, what)
	}
	n := int(d.data[d.pos])<<8 | int(d.data[d.pos+1])
	if n < 2 {
		return nil, fmt.Errorf("jpeg: bad length %d of %s", n, what)
	}
	end := d.pos + n
	if end > len(d.data) {
		return nil, fmt.Errorf("%w (inside %s)", errJPEGTruncated, what)
	}
	s := d.data[d.pos+2 : end]
	d.pos = end
	return s, nil
}

// readSOF parses a frame header (T.81 B.2.2).
func (d *jpegDecoder) readSOF(m byte) error {
	switch m {
	case mSOF0, mSOF1:
	case mSOF2:
		d.progressive = true
	case 0xC9, 0xCA:
		return fmt.Errorf("%w: arithmetic-coded JPEG (SOF%d)", errJPEGUnsupported, m-mSOF0)
	case 0xC3, 0xCB:
		return fmt.Errorf("%w: lossless JPEG (SOF%d)", errJPEGUnsupported, m-mSOF0)
	case mJPG:
		return fmt.Errorf("%w: JPEG extension frame (JPG marker)", errJPEGUnsupported)
	default:
		return fmt.Errorf("%w: hierarchical JPEG (SOF%d)", errJPEGUnsupported, m-mSOF0)
	}
	if d.sawSOF {
		return errors.New("jpeg: duplicate frame header (SOF marker)")
	}
	s, err := d.segment("frame header")
	if err != nil {
		return err
	}
	if len(s) < 6 {
		return fmt.Errorf("jpeg: frame header of %d bytes is too short", len(s))
	}
	if s[0] != 8 {
		return fmt.Errorf("%w: %d-bit samples (only 8-bit)", errJPEGUnsupported, s[0])
	}
	d.height = int(s[1])<<8 | int(s[2])
	d.width = int(s[3])<<8 | int(s[4])
	n := int(s[5])
	if d.width == 0 || d.height == 0 {
		return fmt.Errorf("jpeg: empty image %dx%d (DNL-defined height is not supported)", d.width, d.height)
	}
	if d.width > jpegMaxDimension || d.height > jpegMaxDimension {
		return fmt.Errorf("jpeg: image %dx%d exceeds the %d-pixel side limit", d.width, d.height, jpegMaxDimension)
	}
	if n != 1 && n != 3 && n != 4 {
		return fmt.Errorf("jpeg: cannot handle %d-component images (only 1, 3 or 4)", n)
	}
	if len(s) != 6+3*n {
		return fmt.Errorf("jpeg: frame header length %d does not fit %d components", len(s)+2, n)
	}
	d.comps = make([]jpegComponent, n)
	d.hmax, d.vmax = 1, 1
	for i := range d.comps {
		c := &d.comps[i]
		b := s[6+3*i:]
		c.id, c.h, c.v, c.tq = b[0], int(b[1]>>4), int(b[1]&15), b[2]
		if c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 {
			return fmt.Errorf("jpeg: component %d has bad sampling factors %dx%d", i, c.h, c.v)
		}
		d.hmax = max(d.hmax, c.h)
		d.vmax = max(d.vmax, c.v)
	}
	d.sawSOF = true
	return nil
}

// readAPP parses APP0 (JFIF) and APP14 (Adobe) the way libjpeg does: only
// their first bytes matter, and only before the first scan.
func (d *jpegDecoder) readAPP(m byte) error {
	s, err := d.segment("application segment")
	if err != nil {
		return err
	}
	if m == mAPP0 && len(s) >= 14 && string(s[:5]) == "JFIF\x00" {
		d.jfif = true
	}
	if m == mAPPE && len(s) >= 12 && string(s[:5]) == "Adobe" {
		d.adobe = true
		d.adobeTransform = s[11]
	}
	return nil
}

// readDQT parses quantization tables (T.81 B.2.4.1), 8- or 16-bit.
func (d *jpegDecoder) readDQT() error {
	s, err := d.segment("quantization table")
	if err != nil {
		return err
	}
	for len(s) > 0 {
		pq, tq := s[0]>>4, s[0]&15
		if tq > 3 {
			return fmt.Errorf("jpeg: quantization table index %d out of range", tq)
		}
		size := 64
		if pq != 0 {
			size = 128
		}
		if len(s) < 1+size {
			return errors.New("jpeg: bad length of a quantization table segment")
		}
		t := &d.qt[tq]
		for k := 0; k < 64; k++ {
			if pq != 0 {
				t[jpegNatural[k]] = uint16(s[1+2*k])<<8 | uint16(s[2+2*k])
			} else {
				t[jpegNatural[k]] = uint16(s[1+k])
			}
		}
		d.qtSet[tq] = true
		s = s[1+size:]
	}
	return nil
}

// readDHT parses Huffman tables (T.81 B.2.4.2).
func (d *jpegDecoder) readDHT() error {
	s, err := d.segment("Huffman table")
	if err != nil {
		return err
	}
	for len(s) > 16 {
		class, th := s[0]>>4, s[0]&15
		if class > 1 || th > 3 {
			return fmt.Errorf("jpeg: Huffman table index 0x%02X out of range", s[0])
		}
		var counts [17]int
		total := 0
		for l := 1; l <= 16; l++ {
			counts[l] = int(s[l])
			total += counts[l]
		}
		s = s[17:]
		if total > 256 || total > len(s) {
			return errors.New("jpeg: bad Huffman table (too many symbols)")
		}
		t := &d.dcTab[th]
		if class == 1 {
			t = &d.acTab[th]
		}
		t.build(&counts, s[:total])
		s = s[total:]
	}
	if len(s) != 0 {
		return errors.New("jpeg: bad length of a Huffman table segment")
	}
	return nil
}

// readDRI parses the restart interval (T.81 B.2.4.4).
func (d *jpegDecoder) readDRI() error {
	s, err := d.segment("restart interval")
	if err != nil {
		return err
	}
	if len(s) != 2 {
		return errors.New("jpeg: bad length of a DRI segment")
	}
	d.restart = int(s[0])<<8 | int(s[1])
	return nil
}

// setupFrame runs at the first SOS: it fixes the colour space, the MCU
// geometry and the sample (and, for multi-scan frames, coefficient)
// buffers.
func (d *jpegDecoder) setupFrame() error {
	if d.width*d.height > jpegMaxPixels {
		return fmt.Errorf("jpeg: image %dx%d exceeds the %d-pixel decompression-bomb limit", d.width, d.height, jpegMaxPixels)
	}
	d.color = d.guessColor()
	d.mcusX = ceilDiv(d.width, 8*d.hmax)
	d.mcusY = ceilDiv(d.height, 8*d.vmax)
	for i := range d.comps {
		c := &d.comps[i]
		if d.hmax%c.h != 0 || d.vmax%c.v != 0 {
			return fmt.Errorf("%w: fractional sampling (component %d is %dx%d in a %dx%d frame)",
				errJPEGUnsupported, i, c.h, c.v, d.hmax, d.vmax)
		}
		c.bw, c.bh = d.mcusX*c.h, d.mcusY*c.v
		c.dw = ceilDiv(d.width*c.h, d.hmax)
		c.dh = ceilDiv(d.height*c.v, d.vmax)
		c.wBlocks, c.hBlocks = ceilDiv(c.dw, 8), ceilDiv(c.dh, 8)
		c.pix = make([]byte, c.bw*8*c.bh*8)
		for k := range c.coefBits {
			c.coefBits[k] = -1
		}
	}
	return nil
}

// guessColor picks the colour space of the coded data as libjpeg does
// (jdapimin.c default_decompress_parms).
func (d *jpegDecoder) guessColor() jpegColor {
	switch len(d.comps) {
	case 1:
		return jpegGray
	case 3:
		if d.jfif {
			return jpegYCbCr
		}
		if d.adobe {
			if d.adobeTransform == 0 {
				return jpegRGB
			}
			return jpegYCbCr
		}
		c := d.comps
		if c[0].id == 'R' && c[1].id == 'G' && c[2].id == 'B' {
			return jpegRGB
		}
		return jpegYCbCr
	default:
		if d.adobe && d.adobeTransform != 0 {
			return jpegYCCK
		}
		return jpegCMYK
	}
}

// jpegScan describes one scan (T.81 B.2.3).
type jpegScan struct {
	comps  []*jpegComponent
	ss, se int // spectral selection
	ah, al int // successive approximation
}

// readScan parses the SOS header at d.pos and decodes the scan's
// entropy-coded data.
func (d *jpegDecoder) readScan() error {
	s, err := d.segment("scan header")
	if err != nil {
		return err
	}
	if len(s) < 1 {
		return errors.New("jpeg: empty scan header")
	}
	n := int(s[0])
	if n < 1 || n > 4 || len(s) != 4+2*n {
		return fmt.Errorf("jpeg: bad scan header (%d components in %d bytes)", n, len(s)+2)
	}
	d.scans++
	sc := jpegScan{comps: make([]*jpegComponent, n)}
	last := -1
	for i := 0; i < n; i++ {
		id, tables := s[1+2*i], s[2+2*i]
		ci := -1
		for j := range d.comps {
			if d.comps[j].id == id {
				ci = j
				break
			}
		}
		if ci < 0 {
			return fmt.Errorf("jpeg: scan names unknown component id %d", id)
		}
		if ci <= last {
			return fmt.Errorf("jpeg: scan repeats or reorders component id %d", id)
		}
		last = ci
		c := &d.comps[ci]
		c.td, c.ta = tables>>4, tables&15
		sc.comps[i] = c
	}
	p := s[1+2*n:]
	sc.ss, sc.se, sc.ah, sc.al = int(p[0]), int(p[1]), int(p[2]>>4), int(p[2]&15)

	if d.scans == 1 {
		d.multiScan = d.progressive || n < len(d.comps)
		if d.multiScan {
			for i := range d.comps {
				c := &d.comps[i]
				c.coef = make([]int16, c.bw*c.bh*64)
			}
		}
	}
	if n > 1 {
		blocks := 0
		for _, c := range sc.comps {
			blocks += c.h * c.v
		}
		if blocks > jpegMaxBlocksInMCU {
			return fmt.Errorf("jpeg: %d blocks per MCU exceed the limit of %d", blocks, jpegMaxBlocksInMCU)
		}
	}
	if err := d.checkScan(&sc); err != nil {
		return err
	}
	if d.progressive {
		for _, c := range sc.comps {
			for z := 1; z <= 9; z++ {
				c.prevBits[z] = 0
				if d.scans > 1 {
					c.prevBits[z] = c.coefBits[z]
				}
			}
			for k := sc.ss; k <= sc.se; k++ {
				c.coefBits[k] = int8(sc.al)
			}
		}
	}
	// Latch each component's quantization table at its first scan, as
	// libjpeg does; later DQT segments do not change it.
	for _, c := range sc.comps {
		if c.quant != nil {
			continue
		}
		if c.tq > 3 || !d.qtSet[c.tq] {
			return fmt.Errorf("jpeg: quantization table %d is not defined", c.tq)
		}
		q := new([64]int32)
		for k, v := range d.qt[c.tq] {
			q[k] = int32(int16(v)) // libjpeg keeps multipliers as 16-bit signed values
		}
		c.quant = q
	}
	return d.decodeScan(&sc)
}

// checkScan validates the spectral selection and successive approximation
// of a progressive scan and that the scan's Huffman tables exist.
func (d *jpegDecoder) checkScan(sc *jpegScan) error {
	needDC, needAC := true, true
	if d.progressive {
		dc := sc.ss == 0
		bad := false
		if dc {
			bad = sc.se != 0
			needAC = false
			needDC = sc.ah == 0
		} else {
			bad = sc.ss > sc.se || sc.se > 63 || len(sc.comps) != 1
			needDC = false
		}
		if sc.ah != 0 && sc.al != sc.ah-1 {
			bad = true
		}
		if sc.al > 13 {
			bad = true
		}
		if bad {
			return fmt.Errorf("jpeg: invalid progressive scan (Ss=%d Se=%d Ah=%d Al=%d)", sc.ss, sc.se, sc.ah, sc.al)
		}
	}
	for _, c := range sc.comps {
		if needDC {
			if c.td > 3 || !d.dcTab[c.td].present {
				return fmt.Errorf("jpeg: DC Huffman table %d is not defined", c.td)
			}
			if err := d.dcTab[c.td].check(true); err != nil {
				return err
			}
		}
		if needAC {
			if c.ta > 3 || !d.acTab[c.ta].present {
				return fmt.Errorf("jpeg: AC Huffman table %d is not defined", c.ta)
			}
			if err := d.acTab[c.ta].check(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeScan decodes the entropy-coded segments of one scan, handling
// restart markers between intervals. In a single-scan frame each block is
// transformed to samples as soon as it is decoded.
func (d *jpegDecoder) decodeScan(sc *jpegScan) error {
	mode := scanSequential
	if d.progressive {
		switch {
		case sc.ss == 0 && sc.ah == 0:
			mode = scanDCFirst
		case sc.ss == 0:
			mode = scanDCRefine
		case sc.ah == 0:
			mode = scanACFirst
		default:
			mode = scanACRefine
		}
	}
	mcusX, mcusY := d.mcusX, d.mcusY
	single := len(sc.comps) == 1
	if single {
		mcusX, mcusY = sc.comps[0].wBlocks, sc.comps[0].hBlocks
	}
	for _, c := range sc.comps {
		c.pred = 0
	}
	d.eobrun = 0
	d.br = jpegBits{data: d.data, pos: d.pos}
	br := &d.br

	var blk [64]int16
	nextRST := 0
	toGo := d.restart
	insufficient := false
	for my := 0; my < mcusY; my++ {
		for mx := 0; mx < mcusX; mx++ {
			if !insufficient {
				d.lastGoodRow = my
				if single {
					d.lastGoodRow = my / sc.comps[0].v
				}
			}
			if d.restart > 0 {
				if toGo == 0 {
					var err error
					if insufficient, err = d.processRestart(sc, &nextRST, insufficient); err != nil {
						return err
					}
					toGo = d.restart
				}
				toGo--
			}
			for _, c := range sc.comps {
				bh, bv := c.h, c.v
				if single {
					bh, bv = 1, 1
				}
				for y := 0; y < bv; y++ {
					by := my*bv + y
					for x := 0; x < bh; x++ {
						bx := mx*bh + x
						var b *[64]int16
						if d.multiScan {
							b = (*[64]int16)(c.coef[(by*c.bw+bx)*64:])
						} else {
							blk = [64]int16{}
							b = &blk
						}
						if !insufficient {
							var err error
							switch mode {
							case scanSequential:
								err = br.decodeBlock(b, &d.dcTab[c.td], &d.acTab[c.ta], &c.pred)
							case scanDCFirst:
								err = br.decodeDCFirst(b, &d.dcTab[c.td], &c.pred, sc.al)
							case scanDCRefine:
								br.decodeDCRefine(b, sc.al)
							case scanACFirst:
								err = br.decodeACFirst(b, &d.acTab[c.ta], sc.ss, sc.se, sc.al, &d.eobrun)
							case scanACRefine:
								err = br.decodeACRefine(b, &d.acTab[c.ta], sc.ss, sc.se, sc.al, &d.eobrun)
							}
							if err != nil {
								return err
							}
						}
						if !d.multiScan && bx < c.wBlocks && by < c.hBlocks {
							stride := c.bw * 8
							idctISLOW(b, c.quant, c.pix[by*8*stride+bx*8:], stride)
						}
					}
				}
			}
			if br.eof {
				return fmt.Errorf("%w (data ends inside a scan)", errJPEGTruncated)
			}
			if br.pad > br.n {
				// The MCU needed bits past a marker: libjpeg leaves the
				// rest of this restart interval zero.
				insufficient = true
			}
		}
	}
	d.pos = br.pos
	return nil
}

// Scan kinds: sequential, and the four progressive ones (T.81 G.1.2).
const (
	scanSequential = iota
	scanDCFirst
	scanDCRefine
	scanACFirst
	scanACRefine
)

// processRestart ends a restart interval: it drops the remaining bits,
// expects the next RSTn marker and resets the predictors. A wrong or
// missing marker is resynchronised as libjpeg's jpeg_resync_to_restart
// does. It returns whether the next interval is to be skipped: data
// resumes after a consumed restart marker, while a marker left in place
// makes the next interval read zero bits.
func (d *jpegDecoder) processRestart(sc *jpegScan, nextRST *int, insufficient bool) (bool, error) {
	want := byte(mRST0 + *nextRST)
	*nextRST = (*nextRST + 1) & 7
	d.pos = d.br.pos
	consumed, err := d.findRestart(want)
	if err != nil {
		return false, err
	}
	for _, c := range sc.comps {
		c.pred = 0
	}
	d.eobrun = 0
	if consumed {
		d.br = jpegBits{data: d.data, pos: d.pos}
		return false, nil
	}
	d.br = jpegBits{data: d.data, pos: d.pos, marker: true}
	return insufficient, nil
}

// findRestart reads the next marker and decides, like libjpeg, what to do
// when it is not the expected restart marker: skip an invalid or earlier
// marker and look again, take a far-off restart marker as if it were the
// right one, or leave a valid non-restart marker (or one of the next two
// restart markers) in place. It reports whether a restart marker was
// consumed; if not, d.pos is left on the marker.
func (d *jpegDecoder) findRestart(want byte) (bool, error) {
	n := want - mRST0
	next1, next2 := mRST0+(n+1)&7, mRST0+(n+2)&7
	prev1, prev2 := mRST0+(n+7)&7, mRST0+(n+6)&7
	for {
		// nextMarker always advances, so this loop ends at the data's end.
		m, err := d.nextMarker()
		if err != nil {
			return false, err
		}
		switch {
		case m == want:
			return true, nil
		case m < mSOF0 || m == prev1 || m == prev2:
			continue
		case m < mRST0 || m > mRST7 || m == next1 || m == next2:
			d.pos -= 2
			return false, nil
		default:
			return true, nil
		}
	}
}

// finishCoefficients runs the inverse DCT over every stored block of a
// multi-scan frame once all scans are in, with block smoothing where
// libjpeg applies it.
func (d *jpegDecoder) finishCoefficients() {
	smooth := d.smoothingUseful()
	var zero [64]int32
	for i := range d.comps {
		c := &d.comps[i]
		if smooth {
			d.smoothComponent(c)
			c.coef = nil
			continue
		}
		q := c.quant
		if q == nil {
			q = &zero // never scanned: libjpeg's multiplier table stays zero
		}
		stride := c.bw * 8
		for by := 0; by < c.hBlocks; by++ {
			for bx := 0; bx < c.wBlocks; bx++ {
				b := (*[64]int16)(c.coef[(by*c.bw+bx)*64:])
				idctISLOW(b, q, c.pix[by*8*stride+bx*8:], stride)
			}
		}
		c.coef = nil
	}
}

// jpegNatural maps a zigzag index to the natural (row-major) index; like
// libjpeg's table it has 16 extra entries pointing at the last coefficient
// so that corrupt run lengths past the block's end land there harmlessly.
var jpegNatural = [80]uint8{
	0, 1, 8, 16, 9, 2, 3, 10,
	17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34,
	27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36,
	29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46,
	53, 60, 61, 54, 47, 55, 62, 63,
	63, 63, 63, 63, 63, 63, 63, 63,
	63, 63, 63, 63, 63, 63, 63, 63,
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
