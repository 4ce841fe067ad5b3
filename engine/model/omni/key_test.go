package omni

import "testing"

// TestMediaDigest: the digest changes with any byte, with how the bytes are
// split into items, with the kind of an item and with heard; it is stable.
func TestMediaDigest(t *testing.T) {
	b := func(s ...string) [][]byte {
		out := make([][]byte, len(s))
		for i, x := range s {
			out[i] = []byte(x)
		}
		return out
	}
	base := MediaDigest(b("png1", "png2"), b("wav"), nil, false)
	if MediaDigest(b("png1", "png2"), b("wav"), nil, false) != base {
		t.Fatal("digest not stable")
	}
	for name, d := range map[string][32]byte{
		"a byte":      MediaDigest(b("png1", "png3"), b("wav"), nil, false),
		"split":       MediaDigest(b("png1p", "ng2"), b("wav"), nil, false),
		"order":       MediaDigest(b("png2", "png1"), b("wav"), nil, false),
		"kind":        MediaDigest(b("png1", "png2"), nil, b("wav"), false),
		"moved item":  MediaDigest(b("png1"), b("png2", "wav"), nil, false),
		"heard":       MediaDigest(b("png1", "png2"), b("wav"), nil, true),
		"empty clip":  MediaDigest(b("png1", "png2"), b("wav", ""), nil, false),
		"no media":    MediaDigest(nil, nil, nil, false),
		"extra video": MediaDigest(b("png1", "png2"), b("wav"), b(""), false),
	} {
		if d == base {
			t.Errorf("%s: same digest", name)
		}
	}
}
