package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/api"
)

// testPNG encodes a w×h picture whose pixels depend on seed.
func testPNG(t testing.TB, w, h int, seed uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, color.RGBA{uint8(x*7) + seed, uint8(y*13) ^ seed, uint8(x+y) * seed, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// mediaRequest is a one-question request carrying pictures as data URLs.
func mediaRequest(t testing.TB, schema string, images ...[]byte) *api.Request {
	t.Helper()
	var urls []string
	for _, im := range images {
		urls = append(urls, fmt.Sprintf("%q", "data:image/png;base64,"+base64.StdEncoding.EncodeToString(im)))
	}
	raw := fmt.Sprintf(`{"model":"clef-omni","state":"Photo of the parcel as it arrived.","questions":{%s},"images":[%s]}`, schema, strings.Join(urls, ","))
	req, err := api.ParseRequest([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestPrefixCacheMedia: a record's prefix holds its media, so the cache key
// covers their bytes: the same picture under another schema is a hit (the
// towers do not run again) with the uncached answer; another picture of
// the same size, which gives the same ids, is a miss.
func TestPrefixCacheMedia(t *testing.T) {
	store := newMapStore()
	cached := open(t, "release", Options{PrefixCache: store})
	plain := open(t, "release", Options{})
	a, b := testPNG(t, 40, 30, 1), testPNG(t, 40, 30, 2)
	q1 := `"damaged":{"type":"noul","instructions":"Is the parcel damaged?"}`
	q2 := `"open":{"type":"noul","instructions":"Was the parcel opened?"}`
	for i, c := range []struct {
		req  *api.Request
		hit  bool
		name string
	}{
		{mediaRequest(t, q1, a), false, "picture a"},
		{mediaRequest(t, q2, a), true, "picture a, another schema"},
		{mediaRequest(t, q1, b), false, "picture b, same size"},
		{mediaRequest(t, q2, b), true, "picture b, another schema"},
	} {
		got, st, err := cached.Decide(context.Background(), c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, _, err := plain.Decide(context.Background(), c.req)
		if err != nil {
			t.Fatal(err)
		}
		if st.PrefixHit != c.hit {
			t.Errorf("%d %s: prefix hit %v, want %v", i, c.name, st.PrefixHit, c.hit)
		}
		if c.hit && st.Towers != 0 {
			t.Errorf("%s: the towers ran (%v) on a prefix hit", c.name, st.Towers)
		}
		if !c.hit && (st.Towers <= 0 || st.Decode <= 0 || st.Processor <= 0) {
			t.Errorf("%s: stages %+v", c.name, st)
		}
		gj, _ := got.MarshalJSON()
		wj, _ := want.MarshalJSON()
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s: cached answer\n%s\nuncached\n%s", c.name, gj, wj)
		}
	}
	if store.put != 2 {
		t.Errorf("%d prefixes stored, want 2 (one per picture)", store.put)
	}
}

// TestMediaRefusals: malformed, truncated, oversized and mislabelled media
// each get a 422 (code 5012) naming the item, before any model work.
func TestMediaRefusals(t *testing.T) {
	e := open(t, "release", Options{})
	good := testPNG(t, 8, 8, 3)
	huge := append([]byte(nil), good...) // the header claims 5000×4000
	binary.BigEndian.PutUint32(huge[16:], 5000)
	binary.BigEndian.PutUint32(huge[20:], 4000)
	binary.BigEndian.PutUint32(huge[29:], crc32.ChecksumIEEE(huge[12:29]))
	wav := []byte("RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
	q := `"questions":{"q":{"type":"noul","instructions":"x"}}`
	item := func(ct string, data []byte) string {
		return fmt.Sprintf(`{"content_type":%q,"base64":%q}`, ct, base64.StdEncoding.EncodeToString(data))
	}
	for _, c := range []struct{ name, media, field, want string }{
		{"malformed data URL", `"images":["data:image/png;base64,@@@"]`, "images.0", "images[0]: "},
		{"remote URL", `"images":["data:image/png;base64,` + base64.StdEncoding.EncodeToString(good) + `", "data:https://example.com/a.png"]`, "images.1", "images[1]: "},
		{"truncated PNG", `"images":[` + item("image/png", good[:len(good)/2]) + `]`, "images.0", "images[0]: "},
		{"oversized PNG (header)", `"images":[` + item("image/png", good) + `,` + item("image/png", huge) + `]`, "images.1", "16 MP"},
		{"audio bytes as an image", `"images":[` + item("image/png", wav) + `]`, "images.0", "WAV"},
		{"image bytes as audio", `"audio":[` + item("audio/wav", good) + `]`, "audio.0", "PNG"},
		{"empty WAV", `"audio":[` + item("audio/wav", wav) + `]`, "audio.0", "audio[0]: "},
		{"unknown format", `"images":[` + item("image/png", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")) + `]`, "images.0", "GIF"},
	} {
		req, err := api.ParseRequest([]byte(`{"model":"clef-omni","state":"s",` + q + `,` + c.media + `}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = e.Decide(context.Background(), req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != api.CodeValidation || ae.Field != c.field || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: %v (field %q), want a 422 on %s saying %q", c.name, err, fieldOf(ae), c.field, c.want)
		}
	}
}

func fieldOf(e *api.Error) string {
	if e == nil {
		return ""
	}
	return e.Field
}

// TestTowerUnusable: a vision tower the runtime cannot bind (here its
// configuration disagrees with its weights, as a checkpoint storing a
// tower in another layout would) leaves the text path serving; pictures
// are refused with the reason.
func TestTowerUnusable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(tinyDir, "release")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		data, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if de.Name() == "config.json" {
			data = bytes.Replace(data, []byte(`"intermediate_size": 64,
      "model_type": "qwen3_omni_moe_vision_encoder"`), []byte(`"intermediate_size": 96,
      "model_type": "qwen3_omni_moe_vision_encoder"`), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, de.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, _, err := e.Decide(context.Background(), prefixRequest(t, "a short state", 0)); err != nil {
		t.Fatalf("text request: %v", err)
	}
	_, _, err = e.Decide(context.Background(), mediaRequest(t, `"q":{"type":"noul","instructions":"x"}`, testPNG(t, 8, 8, 1)))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(ae.Message, "vision tower cannot be used") {
		t.Errorf("image request: %v, want a 422 saying the vision tower cannot be used", err)
	}
}
