package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Release-directory file names.
const (
	indexFile     = "model.safetensors.index.json"
	singleFile    = "model.safetensors"
	headFile      = "joint_head.safetensors"
	configFile    = "config.json"
	headConfig    = "joint_head_config.json"
	companionExt  = ".head.gguf"
	ggufExtension = ".gguf"
)

// Open opens a model at path:
//
//   - a release directory (Cloudflare/clef-omni layout): sharded safetensors
//     with model.safetensors.index.json, or a single model.safetensors. The
//     thinker.* tensors are used; talker.* and code2wav.* are present in the
//     release and skipped; any other prefix is an error. joint_head.safetensors,
//     when present, is opened alongside and its tensors keep their torch names
//     (memory_projection.weight, layers.0.linear1.weight, ...): they never
//     collide with thinker.* names.
//   - an MLX directory (config.json with a "quantization" entry): packed
//     weight/scales/biases become MLXAffine4/8 tensors under canonical names,
//     stacked switch_mlp experts become per-expert views (see mlx.go).
//   - a single .safetensors file: its tensors under their stored names.
//   - a .gguf file: llama.cpp names mapped back to canonical names; a companion
//     FILE.head.gguf next to FILE.gguf (written by clef quantize) is opened too.
func Open(path string) (Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if st.IsDir() {
		return openDir(path)
	}
	switch {
	case strings.HasSuffix(path, ".safetensors"):
		return OpenSafetensors(path)
	case strings.HasSuffix(path, ggufExtension):
		return openGGUFModel(path)
	}
	return nil, fmt.Errorf("weights: %s: not a directory, .safetensors or .gguf file", path)
}

// readConfig returns config.json of dir, or nil if there is none.
func readConfig(dir string) (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", filepath.Join(dir, configFile), err)
	}
	return cfg, nil
}

func openDir(dir string) (Model, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	if _, ok := cfg["quantization"]; ok {
		return openMLX(dir, cfg)
	}
	shards, err := modelShards(dir)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	s := newSet("release", dir)
	var total int64
	for _, sh := range shards.files {
		n, err := s.addSafetensorsSized(sh, releaseKeep)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("weights: %v", err)
		}
		total += n
	}
	if err := shards.check(s); err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	if shards.totalSize >= 0 && shards.totalSize != total {
		s.Close()
		return nil, fmt.Errorf("weights: %s: metadata.total_size is %d but the shards hold %d bytes of tensors", shards.index, shards.totalSize, total)
	}
	if hp := filepath.Join(dir, headFile); fileExists(hp) {
		if err := s.addSafetensors(hp, nil); err != nil {
			s.Close()
			return nil, fmt.Errorf("weights: %v", err)
		}
	}
	return s, nil
}

// releaseKeep is the release loading rule: thinker.* is used, talker.* and
// code2wav.* are skipped, anything else is an error.
func releaseKeep(name string) (bool, error) {
	switch {
	case strings.HasPrefix(name, "thinker."):
		return true, nil
	case strings.HasPrefix(name, "talker."), strings.HasPrefix(name, "code2wav."):
		return false, nil
	}
	return false, fmt.Errorf("unexpected tensor outside thinker.*, talker.* and code2wav.*")
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
// *.safetensors except the head.
func modelShards(dir string) (*shardSet, error) {
	ip := filepath.Join(dir, indexFile)
	if fileExists(ip) {
		b, err := os.ReadFile(ip)
		if err != nil {
			return nil, err
		}
		var idx shardIndex
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %v", ip, err)
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
				return nil, fmt.Errorf("%s: tensor %q maps to %q, not a .safetensors file name in the same directory", ip, name, file)
			}
			p := filepath.Join(dir, file)
			ss.weightMap[name] = p
			if !seen[p] {
				seen[p] = true
				ss.files = append(ss.files, p)
			}
		}
		sort.Strings(ss.files)
		for _, p := range ss.files {
			if !fileExists(p) {
				return nil, fmt.Errorf("%s: shard %s is missing", ip, filepath.Base(p))
			}
		}
		return ss, nil
	}
	if p := filepath.Join(dir, singleFile); fileExists(p) {
		return &shardSet{files: []string{p}, totalSize: -1}, nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var files []string
	for _, m := range matches {
		if filepath.Base(m) != headFile {
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
// in its shard (skipped prefixes included) and every kept tensor is indexed.
func (ss *shardSet) check(s *Set) error {
	if ss.weightMap == nil {
		return nil
	}
	for name, file := range s.origin {
		want, ok := ss.weightMap[name]
		if !ok {
			return fmt.Errorf("%s: tensor %q is in %s but not in the index", ss.index, name, filepath.Base(file))
		}
		if want != file {
			return fmt.Errorf("%s: tensor %q is indexed in %s but stored in %s", ss.index, name, filepath.Base(want), filepath.Base(file))
		}
	}
	for name, file := range ss.weightMap {
		if releaseSkipped(name) {
			continue
		}
		if _, ok := s.origin[name]; !ok {
			return fmt.Errorf("%s: tensor %q is indexed in %s but missing from it", ss.index, name, filepath.Base(file))
		}
	}
	return nil
}

func releaseSkipped(name string) bool {
	return strings.HasPrefix(name, "talker.") || strings.HasPrefix(name, "code2wav.")
}
