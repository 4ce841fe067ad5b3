package media

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// This file decodes WAV as FFmpeg's wav demuxer and PCM decoders do for the
// reference: a RIFF/WAVE file (or RF64/BW64) with its chunks in any order,
// PCM of 8 (unsigned), 16, 24, 32 or 64 bits, IEEE float of 32 or 64 bits,
// or G.711 A-law/µ-law, one to eight channels at any rate. The samples go to
// float as FFmpeg converts them (8-bit: (v−128)/128; 16-bit: v/2^15; 24-bit:
// widened to 32 bits, then /2^31; 32-bit: /2^31), then through the mono
// 16 kHz conversion of resample.go.

// WAVE format tags.
const (
	wavePCM        = 0x0001
	waveFloat      = 0x0003
	waveALaw       = 0x0006
	waveMuLaw      = 0x0007
	waveExtensible = 0xfffe
)

// wavFormat is what a WAV file's header says about its samples.
type wavFormat struct {
	tag      int    // wavePCM, waveFloat, waveALaw or waveMuLaw
	channels int    // 1..maxChannels
	rate     int    // samples per second per channel
	width    int    // bytes per sample: 1, 2, 3, 4 or 8
	layout   uint64 // speaker mask, one bit per channel
}

// wavFile is a parsed WAV file: its format and the whole frames of its data
// chunk that the file holds.
type wavFile struct {
	wavFormat
	data     []byte
	declared int64 // frames the data chunk declares (-1: streamed, unknown)
}

// decodeWAV decodes a WAV file to a mono 16 kHz clip. It refuses a clip the
// header says is longer than maxSeconds before decoding anything.
func decodeWAV(data []byte, maxSeconds float64) (*Clip, error) {
	f, err := parseWAV(data)
	if err != nil {
		return nil, err
	}
	frames := int64(len(f.data) / (f.width * f.channels))
	if f.declared >= 0 {
		frames = f.declared
	}
	if secs := float64(frames) / float64(f.rate); secs > maxSeconds {
		return nil, &clipTooLongError{seconds: secs, limit: maxSeconds}
	}
	if f.width == 8 {
		// libswresample works in double for 8-byte sample formats.
		return decodeWAVData[float64](f, maxSeconds)
	}
	return decodeWAVData[float32](f, maxSeconds)
}

// parseWAV reads a WAV file's chunks: the RIFF header, the fmt chunk, and
// the data chunk (the first one); everything else (LIST, fact, cue, ...)
// is skipped. Chunks are word-aligned: an odd size is followed by a pad
// byte. A data chunk that runs past the end of the file (a cut-off file) or
// that declares size 0 or 0xFFFFFFFF (a streamed file) holds the rest of the
// file.
func parseWAV(b []byte) (*wavFile, error) {
	if len(b) < 12 {
		return nil, fmt.Errorf("wav: %d bytes, too short for a RIFF header: %w", len(b), io.ErrUnexpectedEOF)
	}
	rf64 := false
	switch string(b[:4]) {
	case "RIFF":
	case "RF64", "BW64":
		rf64 = true
	case "RIFX":
		return nil, errors.New("wav: big-endian RIFX files not supported")
	default:
		return nil, fmt.Errorf("wav: not a RIFF file (it begins %q)", b[:4])
	}
	if string(b[8:12]) != "WAVE" {
		return nil, fmt.Errorf("wav: RIFF form %q, not WAVE", b[8:12])
	}
	var (
		format     *wavFormat
		data       []byte
		haveData   bool
		dataSize   = int64(-1)
		ds64Data   = int64(-1)
		formatErr  error
		fmtPresent bool
	)
	for off := 12; off+8 <= len(b); {
		id := string(b[off : off+4])
		size := int64(binary.LittleEndian.Uint32(b[off+4:]))
		body := off + 8
		end := int64(body) + size
		switch id {
		case "ds64":
			if rf64 && size >= 16 && end <= int64(len(b)) {
				// Clamped: a size past any real file is as good as huge.
				ds64Data = int64(min(binary.LittleEndian.Uint64(b[body+8:]), 1<<50))
			}
		case "fmt ":
			if fmtPresent {
				break
			}
			fmtPresent = true
			if end > int64(len(b)) {
				return nil, fmt.Errorf("wav: fmt chunk cut off: %w", io.ErrUnexpectedEOF)
			}
			format, formatErr = parseWAVFormat(b[body:end])
		case "data":
			if haveData {
				break
			}
			haveData = true
			switch {
			case rf64 && size == 0xffffffff && ds64Data >= 0:
				size = ds64Data
				end = int64(body) + size
				dataSize = size
			case size == 0 || size == 0xffffffff:
				end = int64(len(b)) // streamed: the rest of the file
			default:
				dataSize = size
			}
			data = b[body:min(end, int64(len(b)))]
		}
		if end >= int64(len(b)) {
			break
		}
		off = int(end + end&1)
	}
	if !fmtPresent {
		return nil, errors.New("wav: no fmt chunk")
	}
	if formatErr != nil {
		return nil, formatErr
	}
	if !haveData {
		return nil, errors.New("wav: no data chunk")
	}
	frame := format.width * format.channels
	f := &wavFile{wavFormat: *format, data: data[:len(data)/frame*frame], declared: -1}
	if dataSize >= 0 {
		f.declared = dataSize / int64(frame)
	}
	return f, nil
}

// KSDATAFORMAT subformat GUIDs end in one of these (the first four bytes
// are the format tag): the media subtype base, the ambisonic base, and a
// broken variant FFmpeg also accepts.
var (
	guidMediaSubtype = [12]byte{0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71}
	guidAmbisonic    = [12]byte{0x21, 0x07, 0xd3, 0x11, 0x86, 0x44, 0xc8, 0xc1, 0xca, 0x00, 0x00, 0x00}
	guidBroken       = [12]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
)

// parseWAVFormat reads a fmt chunk: WAVEFORMAT, PCMWAVEFORMAT, WAVEFORMATEX
// or WAVEFORMATEXTENSIBLE (whose subformat GUID carries the real tag and
// whose channel mask names the speakers).
func parseWAVFormat(c []byte) (*wavFormat, error) {
	if len(c) < 14 {
		return nil, fmt.Errorf("wav: fmt chunk of %d bytes, need at least 14", len(c))
	}
	tag := int(binary.LittleEndian.Uint16(c[0:]))
	f := &wavFormat{
		tag:      tag,
		channels: int(binary.LittleEndian.Uint16(c[2:])),
		rate:     int(binary.LittleEndian.Uint32(c[4:])),
	}
	bitsPer := 8
	if len(c) >= 16 {
		bitsPer = int(binary.LittleEndian.Uint16(c[14:]))
	}
	if tag == waveExtensible {
		if len(c) < 40 || binary.LittleEndian.Uint16(c[16:]) < 22 {
			return nil, errors.New("wav: WAVE_FORMAT_EXTENSIBLE header too short")
		}
		mask := uint64(binary.LittleEndian.Uint32(c[20:]))
		guid := c[24:40]
		if rest := [12]byte(guid[4:]); rest != guidMediaSubtype && rest != guidAmbisonic && rest != guidBroken {
			return nil, fmt.Errorf("wav: WAVE_FORMAT_EXTENSIBLE subformat % x not supported", guid)
		}
		f.tag = int(binary.LittleEndian.Uint32(guid))
		// The mask counts only if it names as many speakers as there are
		// channels.
		if bits.OnesCount64(mask) == f.channels {
			f.layout = mask
		}
	}
	if f.channels < 1 || f.channels > maxChannels {
		return nil, fmt.Errorf("wav: %d channels not supported (1 to %d)", f.channels, maxChannels)
	}
	if f.rate < 1 || f.rate > maxSourceRate {
		return nil, fmt.Errorf("wav: sample rate %d Hz not supported (1 to %d Hz)", f.rate, maxSourceRate)
	}
	if f.layout == 0 {
		f.layout = defaultLayout(f.channels)
	}
	switch f.tag {
	case wavePCM:
		// FFmpeg reads PCM in whole bytes: 12 bits as 16, 20 as 24.
		f.width = (bitsPer + 7) / 8
		if bitsPer < 1 || f.width > 4 && f.width != 8 {
			return nil, fmt.Errorf("wav: %d-bit PCM not supported", bitsPer)
		}
	case waveFloat:
		if bitsPer != 32 && bitsPer != 64 {
			return nil, fmt.Errorf("wav: %d-bit float not supported (32 or 64)", bitsPer)
		}
		f.width = bitsPer / 8
	case waveALaw, waveMuLaw:
		f.width = 1
	default:
		return nil, fmt.Errorf("wav: format tag 0x%04x (%s) not supported (PCM, IEEE float, A-law or µ-law)", f.tag, waveTagName(f.tag))
	}
	return f, nil
}

// waveTagName names the WAVE format tags one meets in practice.
func waveTagName(tag int) string {
	switch tag {
	case 0x0002:
		return "Microsoft ADPCM"
	case 0x0011:
		return "IMA ADPCM"
	case 0x0031:
		return "GSM 6.10"
	case 0x0050:
		return "MPEG audio"
	case 0x0055:
		return "MP3"
	case 0x00ff, 0x1600, 0x1610:
		return "AAC"
	case 0x2000:
		return "AC-3"
	case 0x6750, 0x674f, 0x6771:
		return "Vorbis"
	case 0xf1ac:
		return "FLAC"
	}
	return "unknown"
}

// wavChunkFrames is how many frames decodeWAVData converts at a time.
const wavChunkFrames = 1 << 16

// decodeWAVData converts the data chunk to T, chunk by chunk, and feeds it
// to the mono 16 kHz conversion.
func decodeWAVData[T sample](f *wavFile, maxSeconds float64) (*Clip, error) {
	frames := len(f.data) / (f.width * f.channels)
	expect := int(int64(frames)*SampleRate/int64(f.rate)) + 64
	conv, err := newToClip[T](f.rate, f.channels, f.layout, maxSeconds, expect)
	if err != nil {
		return nil, fmt.Errorf("wav: %w", err)
	}
	planes := make([][]T, f.channels)
	for ch := range planes {
		planes[ch] = make([]T, min(frames, wavChunkFrames))
	}
	frameBytes := f.width * f.channels
	for off := 0; off < frames; off += wavChunkFrames {
		n := min(wavChunkFrames, frames-off)
		for ch := range planes {
			planes[ch] = planes[ch][:n]
		}
		convertPCM(planes, f.data[off*frameBytes:(off+n)*frameBytes], f.tag, f.width)
		if err := conv.write(planes); err != nil {
			return nil, err
		}
	}
	return conv.finish()
}

// convertPCM deinterleaves src (whole frames) into planes, converting each
// sample as FFmpeg's decoder and libswresample's input conversion do. The
// conversions are exact in float64, so rounding the result to T once gives
// what FFmpeg computes in T.
func convertPCM[T sample](planes [][]T, src []byte, tag, width int) {
	chans := len(planes)
	stride := width * chans
	for ch, p := range planes {
		s := src[ch*width:]
		switch {
		case tag == waveFloat && width == 4:
			for i := range p {
				p[i] = T(math.Float32frombits(binary.LittleEndian.Uint32(s[i*stride:])))
			}
		case tag == waveFloat:
			for i := range p {
				p[i] = T(math.Float64frombits(binary.LittleEndian.Uint64(s[i*stride:])))
			}
		case tag == waveALaw:
			for i := range p {
				p[i] = T(float64(aLawToLinear(s[i*stride])) / (1 << 15))
			}
		case tag == waveMuLaw:
			for i := range p {
				p[i] = T(float64(muLawToLinear(s[i*stride])) / (1 << 15))
			}
		case width == 1:
			for i := range p {
				p[i] = T(float64(int(s[i*stride])-128) / (1 << 7))
			}
		case width == 2:
			for i := range p {
				p[i] = T(float64(int16(binary.LittleEndian.Uint16(s[i*stride:]))) / (1 << 15))
			}
		case width == 3:
			for i := range p {
				b := s[i*stride:]
				v := int32(uint32(b[0])<<8 | uint32(b[1])<<16 | uint32(b[2])<<24)
				p[i] = T(float64(v) / (1 << 31))
			}
		case width == 4:
			for i := range p {
				p[i] = T(float64(int32(binary.LittleEndian.Uint32(s[i*stride:]))) / (1 << 31))
			}
		default: // 8-byte integers, converted in double
			for i := range p {
				p[i] = T(float64(int64(binary.LittleEndian.Uint64(s[i*stride:]))) / (1 << 63))
			}
		}
	}
}

// aLawToLinear expands a G.711 A-law byte to 16-bit PCM.
func aLawToLinear(a byte) int16 {
	a ^= 0x55
	t := int(a&0x0f) << 4
	seg := int(a&0x70) >> 4
	switch seg {
	case 0:
		t += 8
	case 1:
		t += 0x108
	default:
		t += 0x108
		t <<= seg - 1
	}
	if a&0x80 != 0 {
		return int16(t)
	}
	return int16(-t)
}

// muLawToLinear expands a G.711 µ-law byte to 16-bit PCM.
func muLawToLinear(u byte) int16 {
	u = ^u
	t := (int(u&0x0f) << 3) + 0x84
	t <<= (u & 0x70) >> 4
	if u&0x80 != 0 {
		return int16(0x84 - t)
	}
	return int16(t - 0x84)
}
