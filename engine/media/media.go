package media

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is the refusal of one item of a request's media list: Field is
// "images" or "audio", Index the item's position. Index is -1 when the
// refusal is about the list as a whole (too many items, too many bytes in
// all).
type Error struct {
	Field string
	Index int
	Msg   string
}

// Error returns "images[2]: <msg>", or "images: <msg>" for the whole list.
func (e *Error) Error() string {
	if e.Index < 0 {
		return e.Field + ": " + e.Msg
	}
	return e.Field + "[" + strconv.Itoa(e.Index) + "]: " + e.Msg
}

// Images checks a request's images against lim (count, bytes of each,
// bytes in all; then each one's declared type, format and dimensions from
// its header) before decoding any, and then decodes each one. A zero limit
// is no limit. Every refusal is an *Error naming the item.
func Images(srcs []Source, lim Limits) ([]*Image, error) {
	if lim.Images > 0 && len(srcs) > lim.Images {
		return nil, &Error{"images", -1, fmt.Sprintf("%d items, at most %d", len(srcs), lim.Images)}
	}
	total := 0
	for i, s := range srcs {
		if err := checkBytes(s.Data, "image", lim.ImageBytes); err != nil {
			return nil, &Error{"images", i, err.Error()}
		}
		total += len(s.Data)
	}
	if lim.ImagesTotalBytes > 0 && total > lim.ImagesTotalBytes {
		return nil, &Error{"images", -1, fmt.Sprintf("%s in all, at most %s", sizeText(total, lim.ImagesTotalBytes), sizeText(lim.ImagesTotalBytes, total))}
	}
	plans := make([]imagePlan, len(srcs))
	for i, s := range srcs {
		p, err := inspectImage(s, lim)
		if err != nil {
			return nil, &Error{"images", i, err.Error()}
		}
		plans[i] = p
	}
	out := make([]*Image, len(srcs))
	for i, p := range plans {
		im, err := p.decode()
		if err != nil {
			return nil, &Error{"images", i, err.Error()}
		}
		out[i] = im
	}
	return out, nil
}

// Audio checks a request's clips against lim (count, bytes of each; then
// each one's declared type and format) before decoding any, and then
// decodes each one to mono float32 at SampleRate, refusing clips longer
// than lim.ClipSeconds. A zero limit is no limit. Every refusal is an
// *Error naming the item.
func Audio(srcs []Source, lim Limits) ([]*Clip, error) {
	if lim.Clips > 0 && len(srcs) > lim.Clips {
		return nil, &Error{"audio", -1, fmt.Sprintf("%d items, at most %d", len(srcs), lim.Clips)}
	}
	for i, s := range srcs {
		if err := checkBytes(s.Data, "clip", lim.ClipBytes); err != nil {
			return nil, &Error{"audio", i, err.Error()}
		}
	}
	plans := make([]audioPlan, len(srcs))
	for i, s := range srcs {
		p, err := inspectAudio(s, lim)
		if err != nil {
			return nil, &Error{"audio", i, err.Error()}
		}
		plans[i] = p
	}
	out := make([]*Clip, len(srcs))
	for i, p := range plans {
		c, err := p.decode()
		if err != nil {
			return nil, &Error{"audio", i, err.Error()}
		}
		out[i] = c
	}
	return out, nil
}

// DecodeImage decodes one image to 8-bit RGB as the reference's
// Image.open(...).convert("RGB") does. It refuses empty or oversized data, a
// declared content type that is not an image type, bytes that are not PNG,
// JPEG or WebP (whatever the declared type says: the bytes decide, as with
// Pillow), and pictures whose header claims more than lim.ImagePixels,
// before decoding anything.
func DecodeImage(src Source, lim Limits) (*Image, error) {
	p, err := inspectImage(src, lim)
	if err != nil {
		return nil, err
	}
	return p.decode()
}

// DecodeAudio decodes one clip to mono float32 samples at SampleRate, as
// the reference's PyAV resampling does. It refuses empty or oversized data,
// a declared content type that is not an audio type, bytes that are not WAV
// or MP3, and clips longer than lim.ClipSeconds (from the header where the
// format allows, before decoding).
func DecodeAudio(src Source, lim Limits) (*Clip, error) {
	p, err := inspectAudio(src, lim)
	if err != nil {
		return nil, err
	}
	return p.decode()
}

// imagePlan is an image that passed the checks made before decoding.
type imagePlan struct {
	data   []byte
	name   string // "PNG", "JPEG", "WebP"
	w, h   int    // from the header
	decode func() (*Image, error)
}

// inspectImage makes every check that needs no decoding: bytes, declared
// type, format, and dimensions from the header.
func inspectImage(src Source, lim Limits) (imagePlan, error) {
	if err := checkBytes(src.Data, "image", lim.ImageBytes); err != nil {
		return imagePlan{}, err
	}
	if err := checkDeclared(src.ContentType, "image"); err != nil {
		return imagePlan{}, err
	}
	var (
		size   func([]byte) (int, int, error)
		decode func([]byte) (*Image, error)
		p      = imagePlan{data: src.Data}
	)
	switch ImageFormat(src.Data) {
	case "png":
		size, decode, p.name = pngSize, decodePNG, "PNG"
	case "jpeg":
		size, decode, p.name = jpegSize, decodeJPEG, "JPEG"
	case "webp":
		size, decode, p.name = webpSize, decodeWebP, "WebP"
	default:
		return imagePlan{}, unsupported(src.Data, "image")
	}
	var err error
	p.w, p.h, err = size(src.Data)
	if err != nil {
		return imagePlan{}, damaged(p.name, "header", err)
	}
	if err := checkPixels(p.w, p.h, lim.ImagePixels); err != nil {
		return imagePlan{}, err
	}
	p.decode = func() (*Image, error) {
		im, err := decode(p.data)
		if err != nil {
			return nil, damaged(p.name, "data", err)
		}
		if im.Width != p.w || im.Height != p.h || len(im.Pix) != 3*p.w*p.h {
			return nil, fmt.Errorf("%s image decoded to %dx%d but its header says %dx%d", p.name, im.Width, im.Height, p.w, p.h)
		}
		return im, nil
	}
	return p, nil
}

// audioPlan is a clip that passed the checks made before decoding.
type audioPlan struct {
	decode func() (*Clip, error)
}

// inspectAudio makes every check that needs no decoding: bytes, declared
// type and format. The duration is the decoders' to check from the header.
func inspectAudio(src Source, lim Limits) (audioPlan, error) {
	if err := checkBytes(src.Data, "clip", lim.ClipBytes); err != nil {
		return audioPlan{}, err
	}
	if err := checkDeclared(src.ContentType, "audio"); err != nil {
		return audioPlan{}, err
	}
	maxSeconds := lim.ClipSeconds
	if maxSeconds <= 0 {
		maxSeconds = math.Inf(1)
	}
	var (
		name   string
		decode func([]byte, float64) (*Clip, error)
	)
	switch AudioFormat(src.Data) {
	case "wav":
		name, decode = "WAV", decodeWAV
	case "mp3":
		name, decode = "MP3", decodeMP3
	default:
		return audioPlan{}, unsupported(src.Data, "audio")
	}
	return audioPlan{decode: func() (*Clip, error) {
		c, err := decode(src.Data, maxSeconds)
		if err != nil {
			return nil, damaged(name, "data", err)
		}
		if c == nil || len(c.Samples) == 0 {
			return nil, fmt.Errorf("%s clip holds no sound (0 samples)", name)
		}
		// A backstop for clips whose length only decoding reveals: the
		// decoders refuse from the header where they can.
		if secs := float64(len(c.Samples)) / SampleRate; secs > maxSeconds+clipSlackSeconds {
			return nil, &clipTooLongError{seconds: secs, limit: maxSeconds}
		}
		return c, nil
	}}, nil
}

// clipSlackSeconds is how far past ClipSeconds a decoded clip may run (the
// resampler's flush and a partial last MP3 frame) before the backstop after
// decoding refuses it.
const clipSlackSeconds = 0.1

// ImageFormat sniffs an image format from its first bytes: "png", "jpeg" or
// "webp", or "" for anything else.
func ImageFormat(data []byte) string {
	switch k := sniff(data); k.name {
	case "png", "jpeg", "webp":
		return k.name
	}
	return ""
}

// AudioFormat sniffs an audio format from its first bytes: "wav" (RIFF/WAVE)
// or "mp3" (an ID3v2 tag, or MPEG layer III frames: a valid frame header
// followed by a second one where the data is long enough), or "" for
// anything else.
func AudioFormat(data []byte) string {
	switch k := sniff(data); k.name {
	case "wav", "mp3":
		return k.name
	}
	return ""
}

// kind is what sniff found: a short name and a phrase for messages.
type kind struct {
	name string // "png", "gif", "wav", ... or "" when unknown
	desc string // "a GIF image"
}

// sniff recognises the formats this package decodes and the common ones it
// does not, so a refusal can say what the bytes are.
func sniff(b []byte) kind {
	has := func(off int, magic string) bool {
		return len(b) >= off+len(magic) && string(b[off:off+len(magic)]) == magic
	}
	switch {
	case has(0, "\x89PNG\r\n\x1a\n"):
		return kind{"png", "a PNG image"}
	case has(0, "\xff\xd8\xff"):
		return kind{"jpeg", "a JPEG image"}
	case has(0, "RIFF") && has(8, "WEBP"):
		return kind{"webp", "a WebP image"}
	case has(0, "RIFF") && has(8, "WAVE"):
		return kind{"wav", "a WAV audio file"}
	case (has(0, "RF64") || has(0, "BW64")) && has(8, "WAVE"):
		return kind{"wav", "an RF64 WAV file"} // 64-bit sizes: decodeWAV reads them, as FFmpeg does
	case has(0, "RIFF") && has(8, "AVI "):
		return kind{"avi", "an AVI video"}
	case has(0, "GIF87a") || has(0, "GIF89a"):
		return kind{"gif", "a GIF image"}
	case has(0, "BM") && len(b) >= 26 && (has(14, "\x0c\x00\x00\x00") || has(14, "\x28\x00\x00\x00") ||
		has(14, "\x38\x00\x00\x00") || has(14, "\x40\x00\x00\x00") || has(14, "\x6c\x00\x00\x00") || has(14, "\x7c\x00\x00\x00")):
		return kind{"bmp", "a BMP image"}
	case has(0, "II*\x00") || has(0, "MM\x00*") || has(0, "II+\x00") || has(0, "MM\x00+"):
		return kind{"tiff", "a TIFF image"}
	case has(0, "\x00\x00\x01\x00") && len(b) >= 6 && b[4]|b[5] != 0:
		return kind{"ico", "an ICO icon"}
	case has(0, "\x00\x00\x00\x0cjP  \r\n\x87\n") || has(0, "\xff\x4f\xff\x51"):
		return kind{"jp2", "a JPEG 2000 image"}
	case has(0, "\x00\x00\x00\x0cJXL \r\n\x87\n") || has(0, "\xff\x0a"):
		return kind{"jxl", "a JPEG XL image"}
	case has(0, "8BPS"):
		return kind{"psd", "a Photoshop image"}
	case has(4, "ftyp"):
		return sniffISO(b)
	case has(0, "OggS"):
		return kind{"ogg", "an Ogg audio file (Vorbis or Opus)"}
	case has(0, "fLaC"):
		return kind{"flac", "a FLAC audio file"}
	case has(0, "FORM") && (has(8, "AIFF") || has(8, "AIFC")):
		return kind{"aiff", "an AIFF audio file"}
	case has(0, "\x1a\x45\xdf\xa3"):
		return kind{"webm", "a WebM/Matroska file"}
	case has(0, "#!AMR"):
		return kind{"amr", "an AMR audio file"}
	case has(0, "%PDF-"):
		return kind{"pdf", "a PDF document"}
	case has(0, "PK\x03\x04"):
		return kind{"zip", "a ZIP archive"}
	case has(0, "ID3"):
		return sniffID3(b)
	}
	if k, ok := sniffMPEG(b); ok {
		return k
	}
	if isText(b) {
		if len(b) >= 5 && strings.EqualFold(string(b[:5]), "data:") {
			return kind{"text", "a data URL in text (base64-encoded twice?)"}
		}
		if t := bytes.TrimLeft(b, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '<' {
			return kind{"text", "XML or SVG text"}
		}
		return kind{"text", "text"}
	}
	return kind{}
}

// sniffISO names an ISO base media file (the "ftyp" box) by its brand.
func sniffISO(b []byte) kind {
	brand := ""
	if len(b) >= 12 {
		brand = string(b[8:12])
	}
	switch brand {
	case "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1":
		return kind{"heic", "a HEIC image"}
	case "avif", "avis":
		return kind{"avif", "an AVIF image"}
	case "M4A ", "M4B ", "M4P ", "F4A ":
		return kind{"m4a", "an M4A (AAC) audio file"}
	case "qt  ":
		return kind{"mov", "a QuickTime video"}
	}
	return kind{"mp4", "an MP4 file"}
}

// sniffID3 looks past an ID3v2 tag: MP3 frames (or nothing recognisable)
// make an MP3 file; another known format behind the tag is named.
func sniffID3(b []byte) kind {
	mp3 := kind{"mp3", "an MP3 audio file"}
	if len(b) < 10 {
		return mp3
	}
	size := int(b[6]&0x7f)<<21 | int(b[7]&0x7f)<<14 | int(b[8]&0x7f)<<7 | int(b[9]&0x7f)
	end := 10 + size
	if b[5]&0x10 != 0 { // footer present
		end += 10
	}
	if end >= len(b) {
		return mp3
	}
	rest := b[end:]
	for len(rest) > 0 && rest[0] == 0 { // padding some taggers leave after the tag
		rest = rest[1:]
	}
	if k, ok := sniffMPEG(rest); ok {
		return k
	}
	if len(rest) >= 3 && string(rest[:3]) == "ID3" {
		return mp3 // a second tag: not looked into further
	}
	switch k := sniff(rest); k.name {
	case "flac", "wav", "ogg", "aac":
		return k
	}
	return mp3
}

// mpegFrame is a parsed MPEG audio frame header.
type mpegFrame struct {
	version int // 1, 2 or 25 (MPEG-2.5)
	layer   int // 1, 2 or 3
	rate    int // samples per second
	length  int // bytes in the frame, header included
}

var (
	mpegBitrates = [2][3][16]int{ // [MPEG-1 or not][layer-1][index], kbit/s
		{
			{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, -1},
			{0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, -1},
			{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, -1},
		},
		{
			{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256, -1},
			{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, -1},
			{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, -1},
		},
	}
	mpegRates = [3]int{44100, 48000, 32000} // MPEG-1; halved for MPEG-2, quartered for 2.5
)

// parseMPEGFrame parses the 4-byte MPEG audio frame header at the start of
// b. Free-format frames (bitrate index 0) are not recognised.
func parseMPEGFrame(b []byte) (mpegFrame, bool) {
	if len(b) < 4 || b[0] != 0xff || b[1]&0xe0 != 0xe0 {
		return mpegFrame{}, false
	}
	var f mpegFrame
	switch (b[1] >> 3) & 3 {
	case 0:
		f.version = 25
	case 2:
		f.version = 2
	case 3:
		f.version = 1
	default:
		return mpegFrame{}, false
	}
	layerBits := (b[1] >> 1) & 3
	if layerBits == 0 {
		return mpegFrame{}, false // reserved (and AAC's ADTS)
	}
	f.layer = int(4 - layerBits)
	brIndex := int(b[2] >> 4)
	rateIndex := int((b[2] >> 2) & 3)
	if brIndex == 0 || brIndex == 15 || rateIndex == 3 || b[3]&3 == 2 {
		return mpegFrame{}, false
	}
	v := 0
	if f.version != 1 {
		v = 1
	}
	bitrate := mpegBitrates[v][f.layer-1][brIndex] * 1000
	f.rate = mpegRates[rateIndex]
	switch f.version {
	case 2:
		f.rate /= 2
	case 25:
		f.rate /= 4
	}
	pad := int(b[2]>>1) & 1
	switch {
	case f.layer == 1:
		f.length = (12*bitrate/f.rate + pad) * 4
	case f.layer == 3 && f.version != 1:
		f.length = 72*bitrate/f.rate + pad
	default:
		f.length = 144*bitrate/f.rate + pad
	}
	return f, f.length >= 4
}

// sniffMPEG recognises MPEG audio frames at the start of b: a valid header,
// and a second one of the same stream right after the first frame when the
// data reaches that far. It also recognises AAC's ADTS framing.
func sniffMPEG(b []byte) (kind, bool) {
	if len(b) >= 2 && b[0] == 0xff && b[1]&0xf6 == 0xf0 {
		return kind{"aac", "an AAC (ADTS) audio stream"}, true
	}
	f, ok := parseMPEGFrame(b)
	if !ok {
		return kind{}, false
	}
	if len(b) >= f.length+4 {
		g, ok := parseMPEGFrame(b[f.length:])
		if !ok || g.version != f.version || g.layer != f.layer || g.rate != f.rate {
			return kind{}, false
		}
	}
	if f.layer != 3 {
		return kind{"mp2", fmt.Sprintf("an MPEG layer %s audio stream", [...]string{"", "I", "II"}[f.layer])}, true
	}
	return kind{"mp3", "an MP3 audio file"}, true
}

// isText reports whether the first bytes of b are printable UTF-8 text.
func isText(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	if len(b) > 256 {
		b = b[:256]
		for i := 0; i < utf8.UTFMax-1 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1] // a rune cut by the window
		}
	}
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}

// unsupported refuses bytes that are no format of the wanted kind ("image"
// or "audio"), naming what they are when sniff knows.
func unsupported(data []byte, want string) error {
	expected := "PNG, JPEG or WebP expected"
	if want == "audio" {
		expected = "WAV or MP3 expected"
	}
	if k := sniff(data); k.desc != "" {
		return fmt.Errorf("bytes are %s; %s", k.desc, expected)
	}
	n := min(len(data), 8)
	return fmt.Errorf("bytes are no known format (they begin % x); %s", data[:n], expected)
}

// damaged wraps a decoder's error: what format, which part, what went
// wrong. A clip refused for its length passes through as it is.
func damaged(name, part string, err error) error {
	var long *clipTooLongError
	if errors.As(err, &long) {
		return err
	}
	msg := err.Error()
	// Drop the decoders' own package prefixes ("png: ", "webp: ").
	for _, p := range []string{"png: ", "webp: ", "vp8: ", "vp8l: ", "riff: ", "jpeg: ", "wav: ", "mp3: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if msg == io.ErrUnexpectedEOF.Error() || msg == io.EOF.Error() ||
		strings.HasSuffix(msg, "not enough pixel data") { // image/png's word for a short IDAT stream
		return fmt.Errorf("%s %s ends early (truncated?)", name, part)
	}
	return fmt.Errorf("%s %s is damaged: %s", name, part, msg)
}

// checkBytes refuses empty data and data over max bytes (0: no limit).
func checkBytes(data []byte, what string, max int) error {
	if len(data) == 0 {
		return fmt.Errorf("empty %s (0 bytes)", what)
	}
	if max > 0 && len(data) > max {
		return fmt.Errorf("%s is %s, at most %s", what, sizeText(len(data), max), sizeText(max, len(data)))
	}
	return nil
}

// checkDeclared refuses a declared content type of the wrong kind (an
// audio type in images, an image type in audio). An empty type and
// application/octet-stream say nothing and pass; a type of the right kind
// naming another format passes too, as the bytes decide.
func checkDeclared(ct, want string) error {
	if ct == "" || ct == "application/octet-stream" {
		return nil
	}
	if strings.HasPrefix(ct, want+"/") {
		return nil
	}
	return fmt.Errorf("declared content type %s is not an %s type", ct, want)
}

// checkPixels refuses zero dimensions and pictures over max pixels (0: no
// limit), from the header, before any decoding.
func checkPixels(w, h, max int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("image is %dx%d: no pixels", w, h)
	}
	px := uint64(w) * uint64(h)
	if max > 0 && px > uint64(max) {
		got, lim := mpText(px, uint64(max)), mpText(uint64(max), px)
		return fmt.Errorf("image is %dx%d, %s MP, at most %s MP", w, h, got, lim)
	}
	return nil
}

// mpText renders n pixels in megapixels with two decimals at most (16.38),
// with more when that would read the same as other.
func mpText(n, other uint64) string {
	for prec := 2; prec <= 6; prec++ {
		s := trimZeros(strconv.FormatFloat(float64(n)/1e6, 'f', prec, 64))
		if s != trimZeros(strconv.FormatFloat(float64(other)/1e6, 'f', prec, 64)) || prec == 6 {
			return s
		}
	}
	return ""
}

// sizeText renders n bytes for a message (bytes, KiB or MiB), precise
// enough to differ from other.
func sizeText(n, other int) string {
	unit, div := "bytes", 1.0
	switch {
	case n >= 1<<20:
		unit, div = "MiB", 1<<20
	case n >= 1<<10:
		unit, div = "KiB", 1<<10
	}
	if div == 1 {
		return strconv.Itoa(n) + " bytes"
	}
	s := trimZeros(strconv.FormatFloat(float64(n)/div, 'f', 2, 64))
	if trimZeros(strconv.FormatFloat(float64(other)/div, 'f', 2, 64)) == s {
		return strconv.Itoa(n) + " bytes"
	}
	return s + " " + unit
}

func trimZeros(s string) string {
	if strings.IndexByte(s, '.') < 0 {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
