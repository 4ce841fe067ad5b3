package video

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// This file is our own container probe: it reads the top-level structure of
// an MP4/QuickTime or WebM/Matroska file, and nothing else, before any
// decoder sees the bytes. It decides the demuxer ffmpeg is told to use (so
// no other one can be chosen from the content), whether the file can be
// read from a pipe, and the duration the container states. It refuses
// anything else with a message naming what the bytes are. Every loop
// advances through data and is capped, so damaged or hostile input costs
// bounded work.

// maxBoxes bounds the top-level ISO BMFF boxes walked (a fragmented MP4
// has two per fragment) and the child boxes walked inside moov.
const maxBoxes = 1 << 16

// maxElements bounds the EBML elements walked in a Matroska file's header
// and segment.
const maxElements = 4096

// Probe identifies the container of data without decoding it. Its error
// wraps ErrCorrupt and says what is wrong: empty input, bytes of another
// format (named when known), a box or element running past the end of the
// data (a truncated file), an MP4 without its moov box, a WebM with another
// DocType.
func Probe(data []byte) (Container, error) {
	switch {
	case len(data) == 0:
		return Container{}, corrupt("empty video (0 bytes)")
	case len(data) >= 4 && string(data[:4]) == "\x1a\x45\xdf\xa3":
		return probeMatroska(data)
	case isISO(data):
		return probeISO(data)
	}
	return Container{}, corrupt(notVideo(data))
}

// ---- ISO BMFF / QuickTime ----

// isISO reports whether data starts like an ISO BMFF or QuickTime file: a
// first box of a type such a file starts with, "ftyp" or (older QuickTime
// files, which have no ftyp) moov, mdat, wide, free, skip or pnot.
func isISO(data []byte) bool {
	if len(data) < 8 {
		return false
	}
	switch string(data[4:8]) {
	case "ftyp":
		return true
	case "moov", "mdat", "wide", "free", "skip", "pnot":
		// A QuickTime file without ftyp: the first box's size must fit
		// the usual 32-bit form or mark a 64-bit size.
		size := binary.BigEndian.Uint32(data)
		return size == 1 || size >= 8
	}
	return false
}

// box is one ISO BMFF box: its type, where its payload starts and ends.
type box struct {
	typ        string
	start, end int // payload bounds in data
	at         int // offset of the box header
}

// nextBox reads the box header at off within data[:limit]. A size of 0
// means "to the end" (the last box of a file).
func nextBox(data []byte, off, limit int) (box, error) {
	if limit-off < 8 {
		return box{}, fmt.Errorf("%d stray bytes at offset %d, too few for a box header (truncated?)", limit-off, off)
	}
	size := uint64(binary.BigEndian.Uint32(data[off:]))
	typ := data[off+4 : off+8]
	for _, c := range typ {
		if c < 0x20 || c > 0x7e {
			return box{}, fmt.Errorf("no valid box at offset %d (type bytes % x): damaged or not an MP4", off, typ)
		}
	}
	hdr := 8
	switch size {
	case 0:
		size = uint64(limit - off)
	case 1:
		if limit-off < 16 {
			return box{}, fmt.Errorf("box %q at offset %d ends inside its 64-bit size (truncated?)", typ, off)
		}
		size = binary.BigEndian.Uint64(data[off+8:])
		hdr = 16
	}
	if size < uint64(hdr) {
		return box{}, fmt.Errorf("box %q at offset %d has an impossible size %d", typ, off, size)
	}
	if size > uint64(limit-off) {
		return box{}, fmt.Errorf("box %q at offset %d claims %d bytes but only %d remain (truncated?)", typ, off, size, limit-off)
	}
	return box{typ: string(typ), start: off + hdr, end: off + int(size), at: off}, nil
}

// probeISO walks the top-level boxes: it needs a moov box, reads the
// duration from moov/mvhd (or, in a fragmented file, moov/mvex/mehd), and
// notes whether moov follows the media data.
func probeISO(data []byte) (Container, error) {
	c := Container{Format: "mp4"}
	if string(data[4:8]) == "ftyp" {
		if err := checkBrand(data); err != nil {
			return Container{}, err
		}
	}
	var moov *box
	mdatSeen := false
	for off, n := 0, 0; off < len(data); n++ {
		if n == maxBoxes {
			return Container{}, corrupt(fmt.Sprintf("MP4 has more than %d top-level boxes", maxBoxes))
		}
		b, err := nextBox(data, off, len(data))
		if err != nil {
			return Container{}, corrupt("MP4 file: " + err.Error())
		}
		switch b.typ {
		case "ftyp":
			if n != 0 {
				return Container{}, corrupt(fmt.Sprintf("MP4 has a second ftyp box at offset %d", b.at))
			}
		case "moov":
			if moov != nil {
				return Container{}, corrupt(fmt.Sprintf("MP4 has a second moov box at offset %d", b.at))
			}
			moov = &b
			c.MoovAfterMdat = mdatSeen
		case "mdat":
			mdatSeen = true
		}
		off = b.end
	}
	if moov == nil {
		return Container{}, corrupt("MP4 has no moov box (the movie header): truncated or not a finished recording")
	}
	d, err := moovDuration(data, *moov)
	if err != nil {
		return Container{}, corrupt("MP4 file: " + err.Error())
	}
	c.Duration = d
	return c, nil
}

// checkBrand refuses ISO BMFF files that are pictures (HEIC, AVIF), naming
// them; every other brand (isom, mp41, mp42, qt, M4A, 3gp...) is left to
// the decoder, which reports a file without video as such.
func checkBrand(data []byte) error {
	if len(data) < 12 {
		return corrupt("MP4 ends inside its ftyp box (truncated?)")
	}
	switch string(data[8:12]) {
	case "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1":
		return corrupt("bytes are a HEIC image, not a video; MP4 or WebM expected")
	case "avif", "avis":
		return corrupt("bytes are an AVIF image, not a video; MP4 or WebM expected")
	}
	return nil
}

// moovDuration reads the movie's duration in seconds: mvhd's duration over
// its timescale, or, when mvhd states none (a fragmented file), mvex/mehd's
// fragment duration. 0 when neither states one.
func moovDuration(data []byte, moov box) (float64, error) {
	var timescale uint32
	var dur, fragDur uint64
	mvhd := false
	off := moov.start
	for n := 0; off < moov.end; n++ {
		if n == maxBoxes {
			return 0, fmt.Errorf("moov has more than %d boxes", maxBoxes)
		}
		b, err := nextBox(data, off, moov.end)
		if err != nil {
			return 0, fmt.Errorf("moov: %v", err)
		}
		switch b.typ {
		case "mvhd":
			p := data[b.start:b.end]
			if len(p) < 4 {
				return 0, fmt.Errorf("mvhd box is %d bytes, too short", len(p))
			}
			switch p[0] {
			case 0:
				if len(p) < 20 {
					return 0, fmt.Errorf("mvhd box is %d bytes, too short", len(p))
				}
				timescale = binary.BigEndian.Uint32(p[12:])
				if d := binary.BigEndian.Uint32(p[16:]); d != math.MaxUint32 {
					dur = uint64(d)
				}
			case 1:
				if len(p) < 32 {
					return 0, fmt.Errorf("mvhd box is %d bytes, too short", len(p))
				}
				timescale = binary.BigEndian.Uint32(p[20:])
				if d := binary.BigEndian.Uint64(p[24:]); d != math.MaxUint64 {
					dur = d
				}
			default:
				return 0, fmt.Errorf("mvhd has unknown version %d", p[0])
			}
			mvhd = true
		case "mvex":
			fragDur = mehdDuration(data, b)
		}
		off = b.end
	}
	if !mvhd {
		return 0, fmt.Errorf("moov has no mvhd box (movie header)")
	}
	if timescale == 0 {
		return 0, nil
	}
	if dur == 0 {
		dur = fragDur
	}
	return float64(dur) / float64(timescale), nil
}

// mehdDuration reads mvex/mehd's fragment duration (in mvhd's timescale),
// 0 when absent or damaged (it only adds information).
func mehdDuration(data []byte, mvex box) uint64 {
	off := mvex.start
	for n := 0; off < mvex.end && n < maxBoxes; n++ {
		b, err := nextBox(data, off, mvex.end)
		if err != nil {
			return 0
		}
		if b.typ == "mehd" {
			p := data[b.start:b.end]
			switch {
			case len(p) >= 8 && p[0] == 0:
				return uint64(binary.BigEndian.Uint32(p[4:]))
			case len(p) >= 12 && p[0] == 1:
				return binary.BigEndian.Uint64(p[4:])
			}
			return 0
		}
		off = b.end
	}
	return 0
}

// ---- Matroska / WebM (EBML) ----

// EBML element IDs used here (with their length markers, as written).
const (
	idEBML           = 0x1A45DFA3
	idDocType        = 0x4282
	idSegment        = 0x18538067
	idInfo           = 0x1549A966
	idTimecodeScale  = 0x2AD7B1
	idDuration       = 0x4489
	idCluster        = 0x1F43B675
	ebmlUnknownSize  = -1
	defaultTimescale = 1_000_000 // ns per tick unless Info says otherwise
)

// element is one EBML element: its ID, where its payload starts and ends
// (end is -1 for an element of unknown size, which runs to its parent's
// end).
type element struct {
	id         uint32
	start, end int
	at         int
}

// readVint reads an EBML variable-length integer at off: its value (the
// length marker kept when keepMarker, as IDs are written) and its length.
// maxLen is 4 for IDs and 8 for sizes.
func readVint(data []byte, off, maxLen int, keepMarker bool) (uint64, int, bool) {
	if off >= len(data) || data[off] == 0 {
		return 0, 0, false
	}
	n := 1
	for mask := byte(0x80); data[off]&mask == 0; mask >>= 1 {
		n++
	}
	if n > maxLen || off+n > len(data) {
		return 0, 0, false
	}
	v := uint64(data[off])
	if !keepMarker {
		v &= uint64(0xff >> n)
	}
	for i := 1; i < n; i++ {
		v = v<<8 | uint64(data[off+i])
	}
	return v, n, true
}

// nextElement reads the element header at off within data[:limit].
func nextElement(data []byte, off, limit int) (element, error) {
	d := data[:limit]
	id, n, ok := readVint(d, off, 4, true)
	if !ok {
		if off+8 > limit {
			return element{}, fmt.Errorf("data ends inside an element header at offset %d (truncated?)", off)
		}
		return element{}, fmt.Errorf("no valid element at offset %d: damaged", off)
	}
	size, m, ok := readVint(d, off+n, 8, false)
	if !ok {
		if off+n+8 > limit {
			return element{}, fmt.Errorf("data ends inside the header of element 0x%X at offset %d (truncated?)", id, off)
		}
		return element{}, fmt.Errorf("element 0x%X at offset %d has no valid size: damaged", id, off)
	}
	e := element{id: uint32(id), start: off + n + m, at: off}
	if size == 1<<(7*uint(m))-1 { // all ones: unknown size
		e.end = ebmlUnknownSize
		return e, nil
	}
	if size > uint64(limit-e.start) {
		return element{}, fmt.Errorf("element 0x%X at offset %d claims %d bytes but only %d remain (truncated?)", id, off, size, limit-e.start)
	}
	e.end = e.start + int(size)
	return e, nil
}

// probeMatroska reads the EBML header (DocType webm or matroska), then the
// Segment's Info for the duration: Duration × TimecodeScale, when stated.
func probeMatroska(data []byte) (Container, error) {
	hdr, err := nextElement(data, 0, len(data))
	if err != nil {
		return Container{}, corrupt("WebM file: " + err.Error())
	}
	if hdr.end == ebmlUnknownSize {
		return Container{}, corrupt("WebM EBML header has no size: damaged")
	}
	docType := ""
	for off, n := hdr.start, 0; off < hdr.end; n++ {
		if n == maxElements {
			return Container{}, corrupt("WebM EBML header has too many elements")
		}
		e, err := nextElement(data, off, hdr.end)
		if err != nil || e.end == ebmlUnknownSize {
			return Container{}, corrupt("WebM EBML header is damaged")
		}
		if e.id == idDocType {
			docType = strings.TrimRight(string(data[e.start:e.end]), "\x00")
		}
		off = e.end
	}
	if docType != "webm" && docType != "matroska" {
		if docType == "" {
			return Container{}, corrupt("EBML file names no DocType; WebM or Matroska expected")
		}
		return Container{}, corrupt(fmt.Sprintf("EBML file of DocType %q; WebM or Matroska expected", printable(docType)))
	}
	c := Container{Format: "webm"}
	if hdr.end >= len(data) {
		return Container{}, corrupt("WebM has no Segment after its header (truncated?)")
	}
	seg, err := nextElement(data, hdr.end, len(data))
	if err != nil {
		return Container{}, corrupt("WebM file: " + err.Error())
	}
	if seg.id != idSegment {
		return Container{}, corrupt(fmt.Sprintf("WebM has element 0x%X where its Segment should be", seg.id))
	}
	segEnd := seg.end
	if segEnd == ebmlUnknownSize {
		segEnd = len(data) // live recordings: the segment runs to the end
	}
	for off, n := seg.start, 0; off < segEnd; n++ {
		if n == maxElements {
			break // Info comes before the media; stop looking
		}
		e, err := nextElement(data, off, segEnd)
		if err != nil {
			return Container{}, corrupt("WebM file: " + err.Error())
		}
		if e.id == idInfo {
			if e.end == ebmlUnknownSize {
				return Container{}, corrupt("WebM Info element has no size: damaged")
			}
			d, err := infoDuration(data, e)
			if err != nil {
				return Container{}, corrupt("WebM file: " + err.Error())
			}
			c.Duration = d
			break
		}
		if e.end == ebmlUnknownSize || e.id == idCluster {
			break // the media begins; Info would have come first
		}
		off = e.end
	}
	return c, nil
}

// infoDuration reads Segment/Info's Duration (a float in TimecodeScale
// units) in seconds; 0 when absent or not a finite, non-negative number,
// in its units or in seconds (a huge Duration times the scale overflows).
func infoDuration(data []byte, info element) (float64, error) {
	scale := uint64(defaultTimescale)
	dur := -1.0
	for off, n := info.start, 0; off < info.end; n++ {
		if n == maxElements {
			return 0, fmt.Errorf("Info has too many elements")
		}
		e, err := nextElement(data, off, info.end)
		if err != nil {
			return 0, fmt.Errorf("Info: %v", err)
		}
		if e.end == ebmlUnknownSize {
			return 0, fmt.Errorf("Info holds an element of unknown size: damaged")
		}
		p := data[e.start:e.end]
		switch e.id {
		case idTimecodeScale:
			if len(p) == 0 || len(p) > 8 {
				return 0, fmt.Errorf("TimecodeScale is %d bytes", len(p))
			}
			var v uint64
			for _, b := range p {
				v = v<<8 | uint64(b)
			}
			if v == 0 {
				return 0, fmt.Errorf("TimecodeScale is 0")
			}
			scale = v
		case idDuration:
			switch len(p) {
			case 4:
				dur = float64(math.Float32frombits(binary.BigEndian.Uint32(p)))
			case 8:
				dur = math.Float64frombits(binary.BigEndian.Uint64(p))
			default:
				return 0, fmt.Errorf("Duration is %d bytes (4 or 8 expected)", len(p))
			}
		}
		off = e.end
	}
	if dur < 0 || math.IsNaN(dur) || math.IsInf(dur, 0) {
		return 0, nil
	}
	if sec := dur * float64(scale) / 1e9; !math.IsInf(sec, 0) {
		return sec, nil
	}
	return 0, nil
}

// ---- everything else ----

// notVideo says what bytes that are neither container are, when a common
// format can be named.
func notVideo(b []byte) string {
	has := func(off int, magic string) bool {
		return len(b) >= off+len(magic) && string(b[off:off+len(magic)]) == magic
	}
	what := ""
	switch {
	case has(0, "\x89PNG\r\n\x1a\n"):
		what = "a PNG image"
	case has(0, "\xff\xd8\xff"):
		what = "a JPEG image"
	case has(0, "GIF87a"), has(0, "GIF89a"):
		what = "a GIF image"
	case has(0, "RIFF") && has(8, "WEBP"):
		what = "a WebP image"
	case has(0, "RIFF") && has(8, "WAVE"):
		what = "a WAV audio file"
	case has(0, "RIFF") && has(8, "AVI "):
		what = "an AVI video"
	case has(0, "OggS"):
		what = "an Ogg file"
	case has(0, "fLaC"):
		what = "a FLAC audio file"
	case has(0, "ID3"):
		what = "an MP3 audio file"
	case has(0, "FLV\x01"):
		what = "an FLV video"
	case has(0, "\x00\x00\x01\xba"):
		what = "an MPEG program stream"
	case len(b) >= 377 && b[0] == 0x47 && b[188] == 0x47 && b[376] == 0x47:
		what = "an MPEG transport stream"
	case has(0, "%PDF-"):
		what = "a PDF document"
	case has(0, "PK\x03\x04"):
		what = "a ZIP archive"
	}
	if what != "" {
		return "bytes are " + what + ", not an MP4 or WebM video"
	}
	n := min(len(b), 8)
	return fmt.Sprintf("bytes are not an MP4/QuickTime or WebM/Matroska video (they start % x)", b[:n])
}

// printable keeps a string from a file safe to quote in a message.
func printable(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
