package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/clefrt/clef/internal/untrusted"
)

// Files of a Hugging Face sharded safetensors directory.
const (
	indexFile     = "model.safetensors.index.json"
	singleFile    = "model.safetensors"
	ggufExtension = ".gguf"
)

// Options tell Open what the container alone cannot: which stored tensors
// the model uses and which files belong with it. The model's own layout
// (engine/release) fills them in; weights knows containers, not models.
type Options struct {
	// Keep decides, for a sharded safetensors directory, whether a stored
	// tensor is used (true), skipped (false) or an error. Nil keeps all.
	// Skipped tensors of an index are still checked to be in their shard.
	Keep func(name string) (bool, error)
	// Extra are files opened alongside, every tensor kept (a directory's
	// head weights; a GGUF's companion). They are left out of the
	// directory's shard glob.
	Extra []string
	// MLX is the "quantization" entry of an MLX checkpoint's configuration:
	// when set, a directory's packed weight/scales/biases triples become
	// MLX affine tensors (see mlx.go).
	MLX json.RawMessage
}

// Open maps the model at path, never copying tensor data:
//
//   - a directory of safetensors: the shards listed by
//     model.safetensors.index.json, or a single model.safetensors, or every
//     *.safetensors file (but the Extra ones); with o.MLX set, as an MLX
//     quantized checkpoint;
//   - a .safetensors file: its tensors;
//   - a .gguf file.
//
// Tensors keep their stored names; o.Extra files are opened alongside.
func Open(path string, o Options) (Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if st.IsDir() {
		if o.MLX != nil {
			return openMLX(path, o)
		}
		return openDir(path, o)
	}
	var s *Set
	switch {
	case strings.HasSuffix(path, ".safetensors"):
		s = newSet("safetensors", path)
		err = s.addSafetensors(path, nil)
	case strings.HasSuffix(path, ggufExtension):
		s = newSet("gguf", path)
		err = s.addGGUFFile(path)
	default:
		return nil, fmt.Errorf("weights: %s: not a directory, .safetensors or .gguf file", path)
	}
	if err == nil {
		err = s.addExtra(o.Extra)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	return s, nil
}

// addExtra opens files alongside the model, every tensor kept.
func (s *Set) addExtra(files []string) error {
	for _, p := range files {
		var err error
		if strings.HasSuffix(p, ggufExtension) {
			err = s.addGGUFFile(p)
		} else {
			err = s.addSafetensors(p, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func openDir(dir string, o Options) (Model, error) {
	shards, err := modelShards(dir, o.Extra, o.Keep)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	s := newSet("safetensors", dir)
	var total int64
	for _, sh := range shards.files {
		n, err := s.addSafetensorsSized(sh, o.Keep)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("weights: %v", err)
		}
		total += n
	}
	if err := shards.check(s, o.Keep); err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	if shards.totalSize >= 0 && shards.totalSize != total {
		s.Close()
		return nil, fmt.Errorf("weights: %s: metadata.total_size is %d but the shards hold %d bytes of tensors", shards.index, shards.totalSize, total)
	}
	if err := s.addExtra(o.Extra); err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	return s, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// shardSet is the list of weight files of a directory and, when it has a
// shard index, the index's map to check the files against.
type shardSet struct {
	index     string
	files     []string
	weightMap map[string]string // tensor -> absolute shard path
	totalSize int64             // from the index metadata; -1 if absent
	all       map[string]bool   // every name seen in the shards (filled by check)
}

type shardIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// modelShards finds the weight files of dir: the shards listed by
// model.safetensors.index.json, else model.safetensors, else every
// *.safetensors except the extra files. A shard of the index may be
// missing when keep skips every tensor the index puts in it (clef pull
// leaves out the shards of speech-output weights).
func modelShards(dir string, extra []string, keep func(string) (bool, error)) (*shardSet, error) {
	ip := filepath.Join(dir, indexFile)
	if fileExists(ip) {
		b, err := os.ReadFile(ip)
		if err != nil {
			return nil, err
		}
		var idx shardIndex
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %s", ip, untrusted.Error(err))
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: empty or missing weight_map", ip)
		}
		ss := &shardSet{index: ip, weightMap: map[string]string{}, totalSize: -1}
		if v, ok := idx.Metadata["total_size"]; ok {
			f, ok := v.(float64)
			if !ok || f < 0 {
				return nil, fmt.Errorf("%s: metadata.total_size is not a non-negative number", ip)
			}
			ss.totalSize = int64(f)
		}
		seen := map[string]bool{}
		for name, file := range idx.WeightMap {
			if file == "" || file != filepath.Base(file) || file == "." || file == ".." || !strings.HasSuffix(file, ".safetensors") {
				return nil, fmt.Errorf("%s: tensor %s maps to %s, not a .safetensors file name in the same directory", ip, untrusted.Quote(name), untrusted.Quote(file))
			}
			p := filepath.Join(dir, file)
			ss.weightMap[name] = p
			if !seen[p] {
				seen[p] = true
				ss.files = append(ss.files, p)
			}
		}
		sort.Strings(ss.files)
		present := ss.files[:0]
		for _, p := range ss.files {
			if fileExists(p) {
				present = append(present, p)
				continue
			}
			if !onlySkipped(ss.weightMap, p, keep) {
				return nil, fmt.Errorf("%s: shard %s is missing", ip, untrusted.Quote(filepath.Base(p)))
			}
			ss.totalSize = -1 // the index's total counts the shard left out
		}
		ss.files = present
		return ss, nil
	}
	if p := filepath.Join(dir, singleFile); fileExists(p) {
		return &shardSet{files: []string{p}, totalSize: -1}, nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var files []string
	skip := map[string]bool{}
	for _, e := range extra {
		skip[filepath.Base(e)] = true
	}
	for _, m := range matches {
		if !skip[filepath.Base(m)] {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no %s, %s or other *.safetensors files", dir, indexFile, singleFile)
	}
	sort.Strings(files)
	return &shardSet{files: files, totalSize: -1}, nil
}

// check verifies the set against the shard index: every indexed tensor is
// in its shard (skipped ones included) and every kept tensor is indexed.
func (ss *shardSet) check(s *Set, keep func(string) (bool, error)) error {
	if ss.weightMap == nil {
		return nil
	}
	for name, file := range s.origin {
		want, ok := ss.weightMap[name]
		if !ok {
			return fmt.Errorf("%s: tensor %s is in %s but not in the index", ss.index, untrusted.Quote(name), filepath.Base(file))
		}
		if want != file {
			return fmt.Errorf("%s: tensor %s is indexed in %s but stored in %s", ss.index, untrusted.Quote(name), untrusted.Quote(filepath.Base(want)), filepath.Base(file))
		}
	}
	for name, file := range ss.weightMap {
		if keep != nil {
			if k, err := keep(name); err == nil && !k {
				continue
			}
		}
		if _, ok := s.origin[name]; !ok {
			return fmt.Errorf("%s: tensor %s is indexed in %s but missing from it", ss.index, untrusted.Quote(name), filepath.Base(file))
		}
	}
	return nil
}

// onlySkipped reports whether every tensor the index maps to shard is one
// keep skips.
func onlySkipped(weightMap map[string]string, shard string, keep func(string) (bool, error)) bool {
	if keep == nil {
		return false
	}
	for name, file := range weightMap {
		if file == shard {
			if k, err := keep(name); err != nil || k {
				return false
			}
		}
	}
	return true
}
