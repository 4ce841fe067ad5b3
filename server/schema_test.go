package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// A small JSON Schema checker: the keywords Cloudflare's clef-omni schema
// uses (type, properties, required, additionalProperties, oneOf, anyOf,
// enum, minimum, maximum, minItems, maxItems, items, minProperties,
// maxProperties, pattern) and nothing else; annotations are ignored. An
// unknown keyword fails loudly rather than passing silently.

type schema = map[string]any

var annotations = map[string]bool{"description": true, "title": true, "default": true, "contentType": true}

// validate returns the first violation of v against sc, "" when v is valid.
func validate(sc schema, v any, at string) string {
	if at == "" {
		at = "$"
	}
	for k := range sc {
		switch k {
		case "type", "properties", "required", "additionalProperties", "oneOf", "anyOf", "enum",
			"minimum", "maximum", "minItems", "maxItems", "items", "minProperties", "maxProperties", "pattern":
		default:
			if !annotations[k] {
				return fmt.Sprintf("%s: schema keyword %q not supported by the test checker", at, k)
			}
		}
	}
	if t, ok := sc["type"].(string); ok {
		if !hasType(v, t) {
			return fmt.Sprintf("%s: want %s, got %T", at, t, v)
		}
	}
	if e, ok := sc["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || jsonEqual(x, v)
		}
		if !found {
			return fmt.Sprintf("%s: %v not in enum %v", at, v, e)
		}
	}
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		if m, ok := sc["minimum"].(json.Number); ok {
			if mf, _ := m.Float64(); f < mf {
				return fmt.Sprintf("%s: %v < minimum %v", at, f, mf)
			}
		}
		if m, ok := sc["maximum"].(json.Number); ok {
			if mf, _ := m.Float64(); f > mf {
				return fmt.Sprintf("%s: %v > maximum %v", at, f, mf)
			}
		}
	}
	if s, ok := v.(string); ok {
		if p, ok := sc["pattern"].(string); ok {
			if !regexp.MustCompile(p).MatchString(s) {
				return fmt.Sprintf("%s: %q does not match %s", at, s, p)
			}
		}
	}
	if a, ok := v.([]any); ok {
		if m, ok := sc["minItems"].(json.Number); ok {
			if mi, _ := m.Int64(); int64(len(a)) < mi {
				return fmt.Sprintf("%s: %d items < minItems %d", at, len(a), mi)
			}
		}
		if m, ok := sc["maxItems"].(json.Number); ok {
			if mi, _ := m.Int64(); int64(len(a)) > mi {
				return fmt.Sprintf("%s: %d items > maxItems %d", at, len(a), mi)
			}
		}
		if is, ok := sc["items"].(schema); ok {
			for i, x := range a {
				if msg := validate(is, x, fmt.Sprintf("%s[%d]", at, i)); msg != "" {
					return msg
				}
			}
		}
	}
	if o, ok := v.(map[string]any); ok {
		if m, ok := sc["minProperties"].(json.Number); ok {
			if mi, _ := m.Int64(); int64(len(o)) < mi {
				return fmt.Sprintf("%s: %d properties < minProperties %d", at, len(o), mi)
			}
		}
		if m, ok := sc["maxProperties"].(json.Number); ok {
			if mi, _ := m.Int64(); int64(len(o)) > mi {
				return fmt.Sprintf("%s: %d properties > maxProperties %d", at, len(o), mi)
			}
		}
		if req, ok := sc["required"].([]any); ok {
			for _, r := range req {
				if _, ok := o[r.(string)]; !ok {
					return fmt.Sprintf("%s: missing required %q", at, r)
				}
			}
		}
		props, _ := sc["properties"].(schema)
		for k, x := range o {
			if ps, ok := props[k].(schema); ok {
				if msg := validate(ps, x, at+"."+k); msg != "" {
					return msg
				}
				continue
			}
			switch ap := sc["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Sprintf("%s: additional property %q", at, k)
				}
			case schema:
				if msg := validate(ap, x, at+"."+k); msg != "" {
					return msg
				}
			}
		}
	}
	if alts, ok := sc["oneOf"].([]any); ok {
		n, msgs := 0, []string{}
		for _, alt := range alts {
			if msg := validate(alt.(schema), v, at); msg == "" {
				n++
			} else {
				msgs = append(msgs, msg)
			}
		}
		if n != 1 {
			return fmt.Sprintf("%s: matches %d of oneOf (want exactly 1): %s", at, n, strings.Join(msgs, "; "))
		}
	}
	if alts, ok := sc["anyOf"].([]any); ok {
		var msgs []string
		for _, alt := range alts {
			msg := validate(alt.(schema), v, at)
			if msg == "" {
				msgs = nil
				break
			}
			msgs = append(msgs, msg)
		}
		if msgs != nil {
			return fmt.Sprintf("%s: matches none of anyOf: %s", at, strings.Join(msgs, "; "))
		}
	}
	return ""
}

func hasType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f == math.Trunc(f) && !math.IsInf(f, 0)
	}
	return false
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// decodeJSON decodes with numbers kept as json.Number.
func decodeJSON(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("not UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// workersAISchemas loads the input and output schemas of the published model definition.
func workersAISchemas(t testing.TB) (input, output schema) {
	t.Helper()
	data, err := os.ReadFile("testdata/workers-ai-clef-omni.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decodeJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	sc := doc.(map[string]any)["schema"].(map[string]any)
	return sc["input"].(schema), sc["output"].(schema)
}

// The checker itself must reject what the schema forbids.
func TestSchemaCheckerRejects(t *testing.T) {
	in, out := workersAISchemas(t)
	good := `{"model":"clef-omni","answers":{"a":{"type":"noul","noul":0.5},"b":{"type":"choice","choice":"x","probabilities":{"x":0.6,"y":0.4},"confidence":0.6},` +
		`"c":{"type":"score","score":0.4,"legend":{"0":"low","1":{"d":1}},"probabilities":{"0":0.6,"1":0.4},"confidence":0.6}},"usage":{"input_tokens":12,"output_tokens":0}}`
	v, err := decodeJSON([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if msg := validate(out, v, ""); msg != "" {
		t.Fatalf("valid response rejected: %s", msg)
	}
	bad := map[string]string{
		"noul above 1":          strings.Replace(good, `"noul":0.5`, `"noul":1.5`, 1),
		"missing usage":         strings.Replace(good, `,"usage":{"input_tokens":12,"output_tokens":0}`, ``, 1),
		"float tokens":          strings.Replace(good, `"input_tokens":12`, `"input_tokens":12.5`, 1),
		"choice w/o confidence": strings.Replace(good, `"probabilities":{"x":0.6,"y":0.4},"confidence":0.6`, `"probabilities":{"x":0.6,"y":0.4}`, 1),
		"unknown type":          strings.Replace(good, `"type":"noul"`, `"type":"yes"`, 1),
		"string probability":    strings.Replace(good, `"x":0.6`, `"x":"0.6"`, 1),
	}
	for name, body := range bad {
		v, err := decodeJSON([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if validate(out, v, "") == "" {
			t.Errorf("%s: accepted", name)
		}
	}
	req := `{"model":" clef-omni ","state":"s","questions":{"q":{"type":"noul","instructions":"ok?"}}}`
	v, _ = decodeJSON([]byte(req))
	if msg := validate(in, v, ""); msg != "" {
		t.Fatalf("valid request rejected: %s", msg)
	}
	for _, body := range []string{
		`{"model":"clef","state":"s","questions":{"q":{"type":"noul","instructions":"ok?"}}}`,
		`{"model":"clef-omni","state":"s","questions":{}}`,
		`{"model":"clef-omni","state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}`,
		`{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul"}}}`,
		`{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul","instructions":"x"}},"images":["http://x/y.png"]}`,
	} {
		v, _ := decodeJSON([]byte(body))
		if validate(in, v, "") == "" {
			t.Errorf("input schema accepted %s", body)
		}
	}
}
