package media

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestSourceParseDataURL(t *testing.T) {
	payload := []byte("\x89PNG\r\n\x1a\n\x00\xff\xfe binary \x00")
	std := base64.StdEncoding.EncodeToString(payload)
	url := base64.URLEncoding.EncodeToString(payload)
	raw := base64.RawStdEncoding.EncodeToString(payload)
	wrapped := std[:8] + "\r\n" + std[8:16] + "\n " + std[16:]
	for _, tc := range []struct {
		name, in, ct string
	}{
		{"plain", "data:image/png;base64," + std, "image/png"},
		{"scheme case", "DaTa:image/png;base64," + std, "image/png"},
		{"type case and params", "data:Image/PNG;name=x.png;BASE64," + std, "image/png"},
		{"no type", "data:;base64," + std, ""},
		{"url-safe alphabet", "data:image/png;base64," + url, "image/png"},
		{"unpadded", "data:image/png;base64," + raw, "image/png"},
		{"line-wrapped", "data:image/png;base64," + wrapped, "image/png"},
		{"surrounding space", "  data:audio/wav;base64," + std + "\n", "audio/wav"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := ParseDataURL(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src.Data, payload) || src.ContentType != tc.ct {
				t.Fatalf("got %q %q, want %q %q", src.ContentType, src.Data, tc.ct, payload)
			}
		})
	}
}

func TestSourceParseDataURLEmptyPayload(t *testing.T) {
	src, err := ParseDataURL("data:image/png;base64,")
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Data) != 0 {
		t.Fatalf("got %d bytes", len(src.Data))
	}
	// The decoders refuse it.
	if _, err := DecodeImage(src, HostedLimits()); err == nil || !strings.Contains(err.Error(), "empty image") {
		t.Fatalf("DecodeImage of an empty payload: %v", err)
	}
}

func TestSourceParseDataURLRefusals(t *testing.T) {
	long := strings.Repeat("iVBORw0KGgo", 4)
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"https URL", "https://example.com/cat.png", []string{"remote URL", "never fetches", "data URL", "{content_type, base64}"}},
		{"http URL", "HTTP://example.com/a.wav", []string{"remote URL", "never fetches"}},
		{"other scheme", "ftp://host/file.png", []string{"URL", "never fetches"}},
		{"file URL", "file:///etc/passwd", []string{"file URL", "never reads files"}},
		{"absolute path", "/home/me/cat.png", []string{"file path", "never reads files"}},
		{"relative path", "./cat.png", []string{"file path"}},
		{"home path", "~/cat.png", []string{"file path"}},
		{"windows path", `C:\Users\me\cat.png`, []string{"file path"}},
		{"bare name", "cat.jpeg", []string{"file path"}},
		{"bare base64", long, []string{"bare base64", "data:"}},
		{"empty", "", []string{"empty string"}},
		{"junk", "hello world", []string{"not a data URL"}},
		{"no comma", "data:image/png;base64", []string{"no ','"}},
		{"not base64", "data:image/png," + long, []string{"not base64-encoded"}},
		{"base64 not last", "data:image/png;base64;x=y," + long, []string{"not base64-encoded"}},
		{"bad media type", "data:png;base64," + long, []string{"not type/subtype"}},
		{"bad character", "data:image/png;base64,iVBO*w0K", []string{"invalid base64", "'*'", "offset 4"}},
		{"percent escape", "data:image/png;base64,iVBO%3D", []string{"invalid base64", "'%'"}},
		{"data after padding", "data:image/png;base64,QQ==QQ==", []string{"after '=' padding"}},
		{"bad padding", "data:image/png;base64,QQ=", []string{"invalid base64", "'='"}},
		{"one char too many", "data:image/png;base64,QUJDR", []string{"truncated"}},
		{"control byte", "data:image/png;base64,QU\x00JD", []string{"byte 0x00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDataURL(tc.in)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSourceFromBase64(t *testing.T) {
	payload := []byte{0xff, 0xd8, 0xff, 0xe0, 1, 2, 3}
	b64 := base64.StdEncoding.EncodeToString(payload)
	src, err := FromBase64(" Image/JPEG; q=1 ", b64)
	if err != nil {
		t.Fatal(err)
	}
	if src.ContentType != "image/jpeg" || !bytes.Equal(src.Data, payload) {
		t.Fatalf("got %+v", src)
	}
	// A whole data URL in the base64 field: its bytes, the object's type.
	src, err = FromBase64("image/png", "data:image/jpeg;base64,"+b64)
	if err != nil {
		t.Fatal(err)
	}
	if src.ContentType != "image/png" || !bytes.Equal(src.Data, payload) {
		t.Fatalf("data URL in base64: got %+v", src)
	}
	src, err = FromBase64("", "data:image/jpeg;base64,"+b64)
	if err != nil || src.ContentType != "image/jpeg" {
		t.Fatalf("data URL in base64 without content_type: %+v %v", src, err)
	}
	for _, tc := range []struct{ ct, b64, want string }{
		{"image/png", "not base64!", "base64: invalid base64: character '!' at offset 10"},
		{"png", b64, "content_type: media type \"png\" is not type/subtype"},
		{"image/png/x", b64, "not type/subtype"},
		{"image/png", "data:image/png,abc", "base64: data URL is not base64-encoded"},
	} {
		if _, err := FromBase64(tc.ct, tc.b64); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromBase64(%q, %q): %v, want %q", tc.ct, tc.b64, err, tc.want)
		}
	}
}

// FuzzParseDataURL: never panics; what it accepts has a normalised type
// and round-trips through the standard encoding.
func FuzzParseDataURL(f *testing.F) {
	for _, s := range []string{
		"data:image/png;base64,iVBORw0KGgo=",
		"DATA:audio/wav;base64,UklGRg",
		"data:;base64,",
		"data:image/png;x=y;base64,a-b_",
		"https://example.com/x.png",
		"/srv/pics/x.png",
		"data:image/png,abc",
		"data:image/png;base64,QQ==QQ==",
		"data:image/png;base64,Q Q\n==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := ParseDataURL(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if src.ContentType != strings.ToLower(src.ContentType) || strings.ContainsAny(src.ContentType, "; ") {
			t.Fatalf("content type %q not normalised", src.ContentType)
		}
		again, err := ParseDataURL("data:" + src.ContentType + ";base64," + base64.StdEncoding.EncodeToString(src.Data))
		if err != nil || !bytes.Equal(again.Data, src.Data) || again.ContentType != src.ContentType {
			t.Fatalf("round trip of %q: %+v %v", s, again, err)
		}
	})
}
