package media

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"

	gomp3 "github.com/hajimehoshi/go-mp3"
)

// This file decodes MP3 as the reference's FFmpeg does it (the mp3 demuxer
// and the mp3float decoder), with go-mp3 doing the Layer III decoding:
//
//   - ID3v2 tags and junk before the first frame are skipped; frames are
//     found by their headers and checked against the first one (MPEG
//     version, layer and sample rate); junk between frames is skipped.
//   - A Xing/Info or VBRI frame at the start is not audio: it is dropped, and
//     a LAME/Lavf/Lavc tag in it gives the encoder delay and padding, from
//     which FFmpeg skips delay+529 samples at the start and trims the
//     padding at the end ("gapless" playback).
//   - Decoding then runs on a cleaned copy of the frames. A frame whose bit
//     reservoir reaches back before the data the stream holds (a stream cut
//     from a longer one) decodes to silence, as FFmpeg's decoder zeroes such
//     granules. go-mp3 v0.3.4 miscomputes the size of some padded MPEG-2
//     frames (22.05 kHz at 8 to 32, 80, 96, 144 and 160 kbit/s), so the
//     frames are re-cut where needed (another bitrate index,
//     main_data_begin moved) so that go-mp3 reads every frame's data where
//     it is.
//   - Frames are decoded in segments, in parallel (see mp3SegmentFrames).
//   - go-mp3 delivers 16-bit stereo: it truncates each sample x to
//     int(x·32767) and duplicates mono. The samples are taken back as the
//     middle of their truncation interval, so they differ from FFmpeg's
//     float output by at most about 1.5e-5 (3e-5 around zero).
//
// Layer I and II, MPEG-2.5 (8, 11.025 and 12 kHz) and free-format streams
// are not supported (go-mp3 decodes none of them).

// mp3Header is a parsed MPEG audio frame header.
type mp3Header struct {
	word     uint32
	lsf      bool // MPEG-2 (low sampling frequencies): one granule per frame
	rate     int
	channels int
	size     int // frame bytes, header included
	sideInfo int // side information bytes
	crc      bool
}

// spf is the samples per channel a Layer III frame holds.
func (h mp3Header) spf() int {
	if h.lsf {
		return 576
	}
	return 1152
}

var (
	mp3Rates    = [3]int{44100, 48000, 32000}
	mp3Bitrates = [2][16]int{ // kbit/s, Layer III: MPEG-1, MPEG-2/2.5
		{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0},
		{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0},
	}
)

// mp3SameMask selects the header bits that stay the same from frame to
// frame (sync, version, layer, sample rate), as FFmpeg's demuxer checks.
const mp3SameMask = 0xffe00000 | 3<<19 | 3<<17 | 3<<10

// mp3FormatError is a frame header of a kind this decoder cannot decode.
type mp3FormatError struct{ what string }

func (e *mp3FormatError) Error() string { return "mp3: " + e.what + " not supported" }

// parseMP3Header parses the frame header at b (4 bytes). ok is false for
// anything that is not a frame header; err is set for a header of an
// unsupported kind (another layer, MPEG-2.5, free format).
func parseMP3Header(b []byte) (h mp3Header, ok bool, err error) {
	w := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	version, layer := w>>19&3, w>>17&3
	bri, sri := w>>12&15, w>>10&3
	if w&0xffe00000 != 0xffe00000 || version == 1 || layer == 0 || bri == 15 || sri == 3 {
		return h, false, nil
	}
	switch {
	case layer != 1:
		return h, true, &mp3FormatError{fmt.Sprintf("MPEG layer %d audio", 4-layer)}
	case version == 0:
		return h, true, &mp3FormatError{"MPEG-2.5 audio (8, 11.025 and 12 kHz)"}
	case bri == 0:
		return h, true, &mp3FormatError{"free-format bitrate"}
	}
	h = mp3Header{word: w, lsf: version == 2, crc: w>>16&1 == 0}
	h.rate = mp3Rates[sri]
	if h.lsf {
		h.rate /= 2
	}
	h.channels = 2
	if w>>6&3 == 3 {
		h.channels = 1
	}
	h.size = h.frameSize(int(bri), int(w>>9&1))
	switch {
	case !h.lsf && h.channels == 2:
		h.sideInfo = 32
	case h.lsf && h.channels == 1:
		h.sideInfo = 9
	default:
		h.sideInfo = 17
	}
	return h, true, nil
}

// frameSize is the size of a frame with this header's version and rate at
// bitrate index bri and padding pad.
func (h mp3Header) frameSize(bri, pad int) int {
	if h.lsf {
		return 72*mp3Bitrates[1][bri]*1000/h.rate + pad
	}
	return 144*mp3Bitrates[0][bri]*1000/h.rate + pad
}

// goSize is the frame size go-mp3 v0.3.4 computes: (144·bitrate/rate +
// padding) >> lsf, which for MPEG-2 is one byte short when the padding bit
// is set and 72·bitrate/rate has a fraction under one half.
func (h mp3Header) goSize(bri, pad int) int {
	s := 144*mp3Bitrates[0][bri]*1000/h.rate + pad
	if h.lsf {
		s = (144*mp3Bitrates[1][bri]*1000/h.rate + pad) >> 1
	}
	return s
}

// mp3Frame is one frame of the stream.
type mp3Frame struct {
	h   mp3Header
	off int // offset in the file
}

// mp3Stream is a scanned MP3 file.
type mp3Stream struct {
	data   []byte
	frames []mp3Frame // audio frames (a Xing/Info/VBRI frame is not one)
	first  mp3Header
	// Gapless trimming from a LAME tag (FFmpeg's start_skip_samples,
	// first_discard_sample and last_discard_sample), in samples from the
	// start of the first audio frame; 0 when absent.
	startSkip, firstDiscard, lastDiscard int64
}

// id3v2Size is the length of the ID3v2 tag at b, or 0.
func id3v2Size(b []byte) int {
	if len(b) < 10 || string(b[:3]) != "ID3" || b[3] == 0xff || b[4] == 0xff ||
		b[6]|b[7]|b[8]|b[9] >= 0x80 {
		return 0
	}
	n := 10 + (int(b[6])<<21 | int(b[7])<<14 | int(b[8])<<7 | int(b[9]))
	if b[5]&0x10 != 0 {
		n += 10 // footer
	}
	return n
}

// scanMP3 finds the frames of an MP3 file without decoding them.
func scanMP3(b []byte) (*mp3Stream, error) {
	off := 0
	for {
		n := id3v2Size(b[off:])
		if n == 0 {
			break
		}
		if off+n > len(b) {
			return nil, fmt.Errorf("mp3: ID3v2 tag of %d bytes runs past the end: %w", n, io.ErrUnexpectedEOF)
		}
		off += n
	}
	s := &mp3Stream{data: b}
	// A header that parses decides the format; the first one that is not
	// supported explains a file with no frames.
	var unsupported error
	header := func(p int) (mp3Header, bool) {
		if p < 0 || p+4 > len(b) {
			return mp3Header{}, false
		}
		h, ok, err := parseMP3Header(b[p:])
		if err != nil && unsupported == nil {
			unsupported = err
		}
		return h, ok && err == nil
	}
	// The first frame: a header followed by another like it (or by the end
	// of the file), as FFmpeg's demuxer looks for it.
	start := -1
	for i := off; i+4 <= len(b); i++ {
		h, ok := header(i)
		if !ok {
			continue
		}
		next := i + h.size
		if next == len(b) {
			start = i
			break
		}
		if h2, ok := header(next); ok && h2.word&mp3SameMask == h.word&mp3SameMask {
			start = i
			break
		}
	}
	if start < 0 {
		if unsupported != nil {
			return nil, unsupported
		}
		return nil, errors.New("mp3: no MPEG audio frames")
	}
	first, _ := header(start)
	s.first = first
	same := func(h mp3Header) bool { return h.word&mp3SameMask == first.word&mp3SameMask }
	for p := start; p+4 <= len(b); {
		h, ok := header(p)
		if ok && same(h) {
			if p+h.size > len(b) {
				break // a cut-off last frame
			}
			if h.channels != first.channels {
				return nil, fmt.Errorf("mp3: the stream switches between mono and stereo at byte %d", p)
			}
			s.frames = append(s.frames, mp3Frame{h: h, off: p})
			p += h.size
			continue
		}
		// Junk: resynchronise on a header followed by another like it.
		q := p + 1
		for ; q+4 <= len(b); q++ {
			if h, ok := header(q); ok && same(h) {
				if h2, ok := header(q + h.size); ok && same(h2) || q+h.size == len(b) {
					break
				}
			}
		}
		p = q
	}
	if start == off && len(s.frames) > 0 {
		s.parseInfoFrame()
	}
	if len(s.frames) == 0 {
		return nil, errors.New("mp3: no MPEG audio frames")
	}
	return s, nil
}

// parseInfoFrame looks for a Xing/Info or VBRI tag in the first frame, as
// FFmpeg's mp3_parse_vbr_tags does, drops the frame if it carries a frame or
// byte count, and takes the encoder delay and padding from a LAME tag.
func (s *mp3Stream) parseInfoFrame() {
	f := s.frames[0]
	b := s.data
	at := func(p, n int) uint64 { // big-endian, zeros past the end
		var v uint64
		for i := range n {
			v <<= 8
			if p+i < len(b) {
				v |= uint64(b[p+i])
			}
		}
		return v
	}
	// The tag sits after the side information (the CRC is not counted).
	p := f.off + 4 + f.h.sideInfo
	var frames, size uint64
	tag := at(p, 4)
	if tag == 'X'<<24|'i'<<16|'n'<<8|'g' || tag == 'I'<<24|'n'<<16|'f'<<8|'o' {
		flags := at(p+4, 4)
		p += 8
		if flags&1 != 0 {
			frames = at(p, 4)
			p += 4
		}
		if flags&2 != 0 {
			size = at(p, 4)
			p += 4
		}
		// A byte count far below the file's size means concatenated files:
		// the frame count is not trusted.
		if rest := uint64(max(len(b)-(f.off+4), 0)); rest > 0 && size > 0 {
			lo, hi := min(rest, size), max(rest, size)
			if rest > size && hi-lo > lo>>4 {
				frames = 0
			}
		}
		if flags&4 != 0 {
			p += 100
		}
		if flags&8 != 0 {
			p += 4
		}
		version := at(p, 4)
		delays := at(p+21, 3)
		if version == 'L'<<24|'A'<<16|'M'<<8|'E' || version == 'L'<<24|'a'<<16|'v'<<8|'f' ||
			version == 'L'<<24|'a'<<16|'v'<<8|'c' {
			startPad, endPad := int64(delays>>12), int64(delays&0xfff)
			s.startSkip = startPad + 528 + 1
			if frames > 0 {
				spf := int64(f.h.spf())
				s.firstDiscard = -endPad + 528 + 1 + int64(frames)*spf
				s.lastDiscard = int64(frames) * spf
			}
		}
	}
	if at(f.off+36, 4) == 'V'<<24|'B'<<16|'R'<<8|'I' && at(f.off+40, 2) == 1 {
		size = at(f.off+46, 4)
		frames = at(f.off+50, 4)
	}
	// Without a frame or byte count FFmpeg keeps the frame as audio (the
	// LAME tag's skip still applies).
	if frames != 0 || size != 0 {
		s.frames = s.frames[1:]
	}
}

// keep returns which of frame k's samples FFmpeg delivers, [from, to), with
// skipLeft the start skip still pending (updated).
func (s *mp3Stream) keep(k int, skipLeft *int64) (from, to int) {
	spf := s.first.spf()
	to = spf
	if *skipLeft >= int64(spf) {
		*skipLeft -= int64(spf)
		return 0, 0
	}
	from = int(*skipLeft)
	*skipLeft = 0
	if s.firstDiscard > 0 {
		pos := int64(k) * int64(spf)
		if end := pos + int64(spf); end >= s.firstDiscard && pos < s.lastDiscard {
			if d := min(end-s.firstDiscard, int64(spf)); d > 0 && d <= int64(to-from) {
				to -= int(d)
			}
		}
	}
	return from, to
}

// samples is the number of samples per channel the decode delivers.
func (s *mp3Stream) samples() int64 {
	skip := s.startSkip
	var n int64
	for k := range s.frames {
		from, to := s.keep(k, &skip)
		n += int64(to - from)
	}
	return n
}

// decodeMP3 decodes an MP3 file to a mono 16 kHz clip. It refuses a clip
// longer than maxSeconds from its frame headers, before decoding.
func decodeMP3(data []byte, maxSeconds float64) (*Clip, error) {
	return decodeMP3Segments(data, maxSeconds, mp3SegmentFrames)
}

// mp3SegmentFrames is how many frames one decoder decodes. Segments are
// decoded in parallel, each starting a little early (see warmUp) so that
// its decoder's state and bit reservoir are the sequential decoder's by
// the segment's first frame: the joined output is bit for bit the
// sequential decode's. The segment size is fixed, so the output does not
// depend on the number of CPUs even for a damaged stream.
const mp3SegmentFrames = 128

// mp3Segment is one segment's decode: frames' samples as float, planar.
type mp3Segment struct {
	planes [][]float32
	frames int   // frames decoded
	err    error // why decoding stopped before the segment's end
}

// decodeMP3Segments is decodeMP3 with segments of seg frames.
func decodeMP3Segments(data []byte, maxSeconds float64, seg int) (*Clip, error) {
	s, err := scanMP3(data)
	if err != nil {
		return nil, err
	}
	n := s.samples()
	if secs := float64(n) / float64(s.first.rate); secs > maxSeconds {
		return nil, &clipTooLongError{seconds: secs, limit: maxSeconds}
	}
	expect := int(n*SampleRate/int64(s.first.rate)) + 64
	conv, err := newToClip[float32](s.first.rate, s.first.channels, defaultLayout(s.first.channels), maxSeconds, expect)
	if err != nil {
		return nil, fmt.Errorf("mp3: %w", err)
	}
	nseg := (len(s.frames) + seg - 1) / seg
	results := make([]chan mp3Segment, nseg)
	for i := range results {
		results[i] = make(chan mp3Segment, 1)
	}
	// At most one segment per CPU is decoded or waiting to be consumed.
	slots := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
	done := make(chan struct{})
	defer close(done)
	go func() {
		for i := range nseg {
			select {
			case slots <- struct{}{}:
			case <-done:
				return
			}
			go func() {
				a := i * seg
				results[i] <- s.decodeSegment(a, min(a+seg, len(s.frames)))
			}()
		}
	}()
	spf := s.first.spf()
	planes := make([][]float32, s.first.channels)
	skip := s.startSkip
	for i := range nseg {
		r := <-results[i]
		for ch := range planes {
			planes[ch] = planes[ch][:0]
		}
		for f := range r.frames {
			from, to := s.keep(i*seg+f, &skip)
			for ch, p := range r.planes {
				planes[ch] = append(planes[ch], p[f*spf+from:f*spf+to]...)
			}
		}
		if err := conv.write(planes); err != nil {
			return nil, err
		}
		<-slots
		if r.err != nil {
			if i == 0 && r.frames == 0 {
				return nil, r.err
			}
			break // a damaged frame ends the stream, as if cut there
		}
	}
	return conv.finish()
}

// decodeSegment decodes frames [a, b) with a decoder of its own, started
// early enough (warmUp) to deliver them as the sequential decode does.
func (s *mp3Stream) decodeSegment(a, b int) mp3Segment {
	j := s.warmUp(a)
	sub := &mp3Stream{data: s.data, frames: s.frames[j:b], first: s.first}
	stream, err := sub.recut(false)
	if err != nil {
		return mp3Segment{err: err}
	}
	dec, err := newGoMP3(stream)
	if err != nil {
		return mp3Segment{err: err}
	}
	spf := s.first.spf()
	out := mp3Segment{planes: make([][]float32, s.first.channels)}
	for ch := range out.planes {
		out.planes[ch] = make([]float32, 0, (b-a)*spf)
	}
	pcm := make([]byte, 4*spf)
	for k := j; k < b; k++ {
		if err := readGoMP3(dec, pcm); err != nil {
			out.err = fmt.Errorf("mp3: frame %d: %w", k, err)
			return out
		}
		if k < a {
			continue
		}
		for ch, p := range out.planes {
			for i := range spf {
				o := 4*i + 2*ch
				p = append(p, fromGoMP3(int16(uint16(pcm[o])|uint16(pcm[o+1])<<8)))
			}
			out.planes[ch] = p
		}
		out.frames++
	}
	return out
}

// warmUp is where a decoder must start to deliver frame a as the
// sequential decoder does. The decoder's state entering frame a (the
// IMDCT overlap and the synthesis filter's history) is made by frames a−1
// and a−2 alone, provided their own data decodes: their bit reservoir
// (main_data_begin, at most 511 bytes back) must be in the stream, so the
// decoder starts that many bytes of main data before frame a−2.
func (s *mp3Stream) warmUp(a int) int {
	j := max(a-2, 0)
	for acc := 0; j > 0 && acc < 512; {
		j--
		h := s.frames[j].h
		acc += h.size - 4 - h.sideInfo
		if h.crc {
			acc -= 2
		}
	}
	return j
}

// go-mp3 is not built for hostile input: a panic in it is a damaged stream.

func newGoMP3(stream []byte) (dec *gomp3.Decoder, err error) {
	defer func() {
		if r := recover(); r != nil {
			dec, err = nil, fmt.Errorf("mp3: damaged frame data (%v)", r)
		}
	}()
	// Without Seek, go-mp3 does not scan the whole stream up front.
	dec, err = gomp3.NewDecoder(struct{ io.Reader }{bytes.NewReader(stream)})
	if err != nil {
		return nil, fmt.Errorf("mp3: %w", err)
	}
	return dec, nil
}

// readGoMP3 reads one frame's samples.
func readGoMP3(dec *gomp3.Decoder, pcm []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mp3: damaged frame data (%v)", r)
		}
	}()
	_, err = io.ReadFull(dec, pcm)
	return err
}

// fromGoMP3 takes a go-mp3 sample back to float: go-mp3 truncates x·32767
// towards zero, so x lies in [v, v+1)/32767 for v > 0 and (v−1, v]/32767
// for v < 0; the middle of that interval is the best estimate.
func fromGoMP3(v int16) float32 {
	switch {
	case v > 0:
		return float32((float64(v) + 0.5) / 32767)
	case v < 0:
		return float32((float64(v) - 0.5) / 32767)
	}
	return 0
}

// recut rebuilds the stream for go-mp3 (see the top of this file): per
// frame its header (emphasis cleared, and another bitrate index or padding
// where go-mp3 would miscount the size), CRC, side information (with
// main_data_begin moved, or all zero for a frame whose data is not there),
// and a slice of the main data. The main data keeps every byte at its
// offset; only the frame boundaries move. reframe moves every boundary it
// can (for tests: the decode must not change).
func (s *mp3Stream) recut(reframe bool) ([]byte, error) {
	type frameInfo struct {
		head, side []byte // header+CRC, side information
		h          mp3Header
		zero       bool // the data is not there: decode silence
		p, q       int  // the frame's data in the main data stream
	}
	lsf := s.first.lsf
	maxBegin := 511
	if lsf {
		maxBegin = 255
	}
	fs := make([]frameInfo, len(s.frames))
	var main []byte
	consumed := 0 // where the decoder's unread data starts
	for k, f := range s.frames {
		fr := s.data[f.off : f.off+f.h.size]
		headLen := 4
		if f.h.crc {
			headLen = 6
		}
		if headLen+f.h.sideInfo > len(fr) {
			return nil, fmt.Errorf("mp3: frame %d too short for its side information", k)
		}
		side := fr[headLen : headLen+f.h.sideInfo]
		begin, bits := sideInfoData(side, lsf, f.h.channels)
		end := len(main) // the frame's own main data starts here
		main = append(main, fr[headLen+f.h.sideInfo:]...)
		fi := frameInfo{head: fr[:headLen], side: side, h: f.h}
		if begin > end-consumed {
			fi.zero = true
		} else {
			fi.p = end - begin
			fi.q = min(fi.p+(bits+7)/8, len(main))
			consumed = fi.q
		}
		fs[k] = fi
	}
	out := make([]byte, 0, len(s.data)+len(s.frames)*8)
	var (
		endPrev = 0 // end of the previous frame's slice of the main data
		bufPrev = 0 // bytes go-mp3 holds after the previous frame
		origEnd = 0 // where the original frame boundary lies
	)
	for k := range fs {
		fi := &fs[k]
		overhead := len(fi.head) + len(fi.side)
		origEnd += fi.h.size - overhead
		begin := 0
		if !fi.zero {
			begin = endPrev - fi.p
			if k == 0 && begin != 0 || begin < 0 || begin > min(maxBegin, bufPrev) {
				fi.zero = true // cannot be placed for go-mp3: decode silence
			}
		}
		if fi.zero {
			begin = min(maxBegin, bufPrev)
		}
		// The slice must reach the end of this frame's data and the start
		// of the next frame's, and not so far past the latter that its
		// main_data_begin overflows.
		lower, upper := endPrev, -1
		if !fi.zero {
			lower = max(lower, fi.q)
		}
		if k+1 < len(fs) && !fs[k+1].zero {
			lower = max(lower, fs[k+1].p)
			upper = fs[k+1].p + maxBegin
		}
		bri, pad, size := s.pickSize(fi.h, overhead, endPrev, origEnd, lower, upper, reframe)
		if size < 0 {
			// Nothing fits: make the next frame silent instead.
			if k+1 < len(fs) {
				fs[k+1].zero = true
			}
			bri, pad, size = s.pickSize(fi.h, overhead, endPrev, origEnd, max(endPrev, fi.q), -1, false)
			if size < 0 {
				return nil, fmt.Errorf("mp3: frame %d cannot be re-cut", k)
			}
		}
		w := fi.h.word&^(0xf<<12|1<<9|3) | uint32(bri)<<12 | uint32(pad)<<9
		out = append(out, byte(w>>24), byte(w>>16), byte(w>>8), byte(w))
		out = append(out, fi.head[4:]...)
		side := len(out)
		if fi.zero {
			out = append(out, make([]byte, len(fi.side))...)
		} else {
			out = append(out, fi.side...)
		}
		setMainDataBegin(out[side:], lsf, begin)
		end := endPrev + size
		if endPrev < len(main) {
			out = append(out, main[endPrev:min(end, len(main))]...)
		}
		if end > len(main) {
			out = append(out, make([]byte, end-max(endPrev, len(main)))...)
		}
		bufPrev = begin + size
		endPrev = end
	}
	return out, nil
}

// pickSize chooses a bitrate index and padding for a frame whose slice of
// the main data starts at from: the original boundary origEnd if go-mp3 can
// read it and it lies in [lower, upper] (upper < 0: no bound), else the
// nearest boundary at or above lower (avoiding the original one if
// reframe). size is the slice length, or −1.
func (s *mp3Stream) pickSize(h mp3Header, overhead, from, origEnd, lower, upper int, reframe bool) (bri, pad, size int) {
	fits := func(end int) bool { return end >= lower && (upper < 0 || end <= upper) }
	origBri, origPad := int(h.word>>12&15), int(h.word>>9&1)
	if g := h.goSize(origBri, origPad) - overhead; from+g == origEnd && fits(origEnd) && !reframe {
		return origBri, origPad, g
	}
	size = -1
	for b := 1; b < 15; b++ {
		for p := range 2 {
			g := h.goSize(b, p) - overhead
			if g < 0 || g > 1500 || !fits(from+g) {
				continue
			}
			if from+g == origEnd && !reframe {
				return b, p, g
			}
			if size < 0 || g < size {
				bri, pad, size = b, p, g
			}
		}
	}
	return bri, pad, size
}

// sideInfoData reads main_data_begin and the total part2_3_length (in bits)
// from a frame's side information.
func sideInfoData(side []byte, lsf bool, channels int) (begin, bits int) {
	r := bitReader{b: side}
	if lsf {
		begin = r.read(8)
		r.skip(channels) // private bits: 1 (mono) or 2 (stereo)
	} else {
		begin = r.read(9)
		if channels == 1 {
			r.skip(5 + 4)
		} else {
			r.skip(3 + 8)
		}
	}
	granules, rest := 2, 47
	if lsf {
		granules, rest = 1, 51
	}
	for range granules * channels {
		bits += r.read(12)
		r.skip(rest)
	}
	return begin, bits
}

// setMainDataBegin writes main_data_begin into side information.
func setMainDataBegin(side []byte, lsf bool, begin int) {
	if lsf {
		side[0] = byte(begin)
		return
	}
	side[0] = byte(begin >> 1)
	side[1] = side[1]&0x7f | byte(begin&1)<<7
}

// bitReader reads big-endian bit fields; past the end it reads zeros.
type bitReader struct {
	b   []byte
	pos int
}

func (r *bitReader) read(n int) int {
	v := 0
	for range n {
		bit := 0
		if i := r.pos >> 3; i < len(r.b) {
			bit = int(r.b[i]>>(7-r.pos&7)) & 1
		}
		v = v<<1 | bit
		r.pos++
	}
	return v
}

func (r *bitReader) skip(n int) { r.pos += n }
