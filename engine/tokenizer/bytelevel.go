package tokenizer

import "unicode/utf8"

// Byte-level alphabet (GPT-2's bytes_to_unicode): every byte is written as one
// printable code point so that vocabulary and merges can be stored as text.
// Bytes that are printable already ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 are moved, in byte order, to U+0100 upward. A space
// (0x20) therefore appears as 'Ġ' (U+0120) and a newline as 'Ċ' (U+010A).

// byteToRune maps a byte to its byte-level code point.
var byteToRune [256]rune

// runeToByte maps a byte-level code point (< 0x144) back to its byte; -1 if
// the code point is not in the alphabet.
var runeToByte [0x144]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevelDecode turns a token as written in the vocabulary into the bytes it
// stands for. Like the Hugging Face ByteLevel decoder, a token holding any
// code point outside the alphabet is kept as its own UTF-8 bytes.
func byteLevelDecode(tok string) ([]byte, bool) {
	out, ok := appendByteLevelDecode(make([]byte, 0, len(tok)), tok)
	return out, ok
}

// appendByteLevelDecode appends the bytes tok stands for to dst.
func appendByteLevelDecode(dst []byte, tok string) ([]byte, bool) {
	n := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return append(dst[:n], tok...), false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

// byteLevelEncode writes raw bytes in the byte-level alphabet.
func byteLevelEncode(raw string) string {
	buf := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteToRune[raw[i]])
	}
	return string(buf)
}
