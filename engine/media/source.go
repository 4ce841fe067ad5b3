package media

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Source is one media item as a request sent it: the bytes after base64
// decoding and the declared content type ("" when none), lower-cased and
// without parameters.
type Source struct {
	Data        []byte
	ContentType string
}

// acceptedShapes ends every refusal of an item's shape: what a request may
// send instead.
const acceptedShapes = "send a base64 data URL (data:<type>;base64,<payload>) or a {content_type, base64} object"

// ParseDataURL parses a data: URL as a request sends one. The scheme is
// matched without regard to case (the schema's ^[Dd][Aa][Tt][Aa]: pattern),
// the payload must be base64 (";base64,"), and the media type is kept in
// ContentType. Remote URLs, file paths and anything else are refused: the
// daemon never fetches or reads anything on a request's behalf.
func ParseDataURL(s string) (Source, error) {
	s = strings.TrimSpace(s)
	if len(s) < 5 || !strings.EqualFold(s[:5], "data:") {
		return Source{}, notDataURL(s)
	}
	rest := s[5:]
	comma := strings.IndexByte(rest, ',')
	if comma < 0 {
		return Source{}, errors.New("data URL has no ',' before its payload; " + acceptedShapes)
	}
	meta, payload := rest[:comma], rest[comma+1:]
	params := strings.Split(meta, ";")
	if len(params) < 2 || !strings.EqualFold(strings.TrimSpace(params[len(params)-1]), "base64") {
		return Source{}, errors.New("data URL is not base64-encoded (no ';base64,' before the payload); " + acceptedShapes)
	}
	ct, err := mediaType(params[0])
	if err != nil {
		return Source{}, fmt.Errorf("data URL: %w", err)
	}
	data, err := decodeBase64(payload)
	if err != nil {
		return Source{}, fmt.Errorf("data URL payload: %w", err)
	}
	return Source{Data: data, ContentType: ct}, nil
}

// FromBase64 builds a Source from the {content_type, base64} object form. A
// complete data URL in the base64 field is accepted too; its media type is
// used when content_type is empty.
func FromBase64(contentType, b64 string) (Source, error) {
	ct, err := mediaType(contentType)
	if err != nil {
		return Source{}, fmt.Errorf("content_type: %w", err)
	}
	if t := strings.TrimSpace(b64); len(t) >= 5 && strings.EqualFold(t[:5], "data:") {
		src, err := ParseDataURL(t)
		if err != nil {
			return Source{}, fmt.Errorf("base64: %w", err)
		}
		if ct != "" {
			src.ContentType = ct
		}
		return src, nil
	}
	data, err := decodeBase64(b64)
	if err != nil {
		return Source{}, fmt.Errorf("base64: %w", err)
	}
	return Source{Data: data, ContentType: ct}, nil
}

// notDataURL explains why a string that is not a data: URL is refused.
func notDataURL(s string) error {
	lower := strings.ToLower(s)
	switch {
	case s == "":
		return errors.New("empty string, not a data URL; " + acceptedShapes)
	case strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://"):
		return fmt.Errorf("remote URL %s refused: the daemon never fetches anything; %s", quoteShort(s), acceptedShapes)
	case strings.HasPrefix(lower, "file:"):
		return fmt.Errorf("file URL %s refused: the daemon never reads files; %s", quoteShort(s), acceptedShapes)
	case hasScheme(s):
		return fmt.Errorf("URL %s refused: the daemon never fetches anything; %s", quoteShort(s), acceptedShapes)
	case looksLikePath(s):
		return fmt.Errorf("file path %s refused: the daemon never reads files; %s", quoteShort(s), acceptedShapes)
	case looksLikeBase64(s):
		return errors.New("bare base64 without a data: prefix; " + acceptedShapes)
	}
	return fmt.Errorf("%s is not a data URL; %s", quoteShort(s), acceptedShapes)
}

// looksLikePath reports whether s reads as a file path: absolute, relative
// to the current or home directory, or a Windows drive path.
func looksLikePath(s string) bool {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "~") || strings.HasPrefix(s, `\\`) || strings.HasPrefix(s, `.\`) {
		return true
	}
	if len(s) >= 3 && isLetter(s[0]) && s[1] == ':' && (s[2] == '\\' || s[2] == '/') {
		return true
	}
	// A short name with an image or audio extension ("cat.png").
	if len(s) <= 260 && !strings.ContainsAny(s, " \t\n") {
		if dot := strings.LastIndexByte(s, '.'); dot > 0 {
			switch strings.ToLower(s[dot+1:]) {
			case "png", "jpg", "jpeg", "webp", "gif", "bmp", "tif", "tiff", "heic", "avif",
				"wav", "mp3", "ogg", "flac", "m4a", "aac", "opus", "mp4", "webm", "mov":
				return true
			}
		}
	}
	return false
}

// hasScheme reports whether s starts with a URL scheme followed by "://".
func hasScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 || i > 32 {
		return false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		if !isLetter(c) && !(j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// looksLikeBase64 reports whether s is long and made only of base64
// characters, so a missing data: prefix is the likely mistake.
func looksLikeBase64(s string) bool {
	if len(s) < 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b64Value(s[i]) < 0 && s[i] != '=' && !isSpace(s[i]) {
			return false
		}
	}
	return true
}

// mediaType normalises a declared media type: trimmed, lower-cased, with
// parameters (";charset=...") dropped. An empty type stays empty; a type
// that is not type/subtype is refused.
func mediaType(s string) (string, error) {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", nil
	}
	slash := strings.IndexByte(s, '/')
	if slash <= 0 || slash == len(s)-1 || strings.IndexByte(s[slash+1:], '/') >= 0 {
		return "", fmt.Errorf("media type %s is not type/subtype (e.g. image/png)", quoteShort(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,:\"[]?=`, c) >= 0 {
			return "", fmt.Errorf("media type %s has a character a media type cannot hold", quoteShort(s))
		}
	}
	return s, nil
}

// decodeBase64 decodes a base64 payload. It accepts the standard alphabet
// and the URL-safe one ('-' and '_' for '+' and '/'), ignores ASCII
// whitespace anywhere (line-wrapped payloads), and takes the '=' padding as
// optional; padding that is present must be at the end and complete a
// 4-character group. Any other character is refused, with its offset.
func decodeBase64(s string) ([]byte, error) {
	clean := make([]byte, 0, len(s))
	pad := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isSpace(c):
			continue
		case c == '=':
			pad++
			continue
		case pad > 0:
			return nil, fmt.Errorf("invalid base64: %s at offset %d after '=' padding", quoteChar(c), i)
		}
		switch c {
		case '-':
			c = '+'
		case '_':
			c = '/'
		}
		if b64Value(c) < 0 {
			return nil, fmt.Errorf("invalid base64: %s at offset %d", quoteChar(c), i)
		}
		clean = append(clean, c)
	}
	switch {
	case len(clean)%4 == 1:
		return nil, fmt.Errorf("invalid base64: %d characters cannot end a base64 payload (truncated?)", len(clean))
	case pad > 0 && (pad > 2 || (len(clean)+pad)%4 != 0):
		return nil, fmt.Errorf("invalid base64: %d '=' after %d characters", pad, len(clean))
	}
	out := make([]byte, base64.RawStdEncoding.DecodedLen(len(clean)))
	n, err := base64.RawStdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("invalid base64: %v", err)
	}
	return out[:n], nil
}

// b64Value returns the 6-bit value of a standard base64 character, or -1.
func b64Value(c byte) int {
	switch {
	case c >= 'A' && c <= 'Z':
		return int(c - 'A')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 26
	case c >= '0' && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// quoteShort quotes s for a message, cut to a readable length.
func quoteShort(s string) string {
	const max = 48
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// quoteChar names one byte for a message.
func quoteChar(c byte) string {
	if c >= ' ' && c < 0x7f {
		return fmt.Sprintf("character %q", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
