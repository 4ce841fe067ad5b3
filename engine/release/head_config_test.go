package release

import (
	"strings"
	"testing"
)

func TestParseHeadErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 5, "feedforward": 64}`, "multiple of heads"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4}`, "feedforward = 0"},
		{`{"hidden_size": -1, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64}`, "hidden_size = -1"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64, "depth": 3}`, "unknown field"},
		{`{"hidden_size": 64, "width": 1e12}`, "width"},
		{`{"hidden_size": 64,`, "unexpected EOF"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 100000, "layers": 2, "heads": 4, "feedforward": 64}`, "routing_layers"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64, "dropout": 1}`, "dropout"},
	} {
		_, err := ParseHead([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.json, err, tc.want)
		}
	}
	c, err := ParseHead([]byte(`{"hidden_size": 64, "width": 32, "routing_layers": 0, "layers": 1, "heads": 4, "feedforward": 64, "dropout": 0.1}`))
	if err != nil || c.Width != 32 || c.Dropout != 0.1 {
		t.Errorf("ParseHead = %+v, %v", c, err)
	}
}

func FuzzParseHead(f *testing.F) {
	f.Add([]byte(`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64}`))
	f.Add([]byte(`{"hidden_size": 64, "width": 0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseHead(data)
		if err == nil && c.Validate() != nil {
			t.Errorf("ParseHead accepted an invalid config %+v", c)
		}
	})
}
