package pyjson

import (
	"strconv"
	"strings"
	"testing"
)

// benchDoc is a ~1 MB state: an array of records with strings, ints, floats
// and nested objects, written with unsorted keys.
func benchDoc() []byte {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < 1<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"id":` + strconv.Itoa(i) + `,"text":"Customer \"` + strconv.Itoa(i) +
			`\" wrote: the parcel arrived late — again.\n","score":` + strconv.FormatFloat(float64(i)*0.37, 'g', -1, 64) +
			`,"tags":["late","refund",null,true],"meta":{"z":1e-05,"a":1.0}}`)
	}
	b.WriteString("]")
	return []byte(b.String())
}

func BenchmarkDecode(b *testing.B) {
	doc := benchDoc()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if _, err := Decode(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	doc := benchDoc()
	v, err := Decode(doc)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	var buf []byte
	for b.Loop() {
		buf = Append(buf[:0], v, Compact)
	}
}
