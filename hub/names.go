package hub

import (
	"fmt"
	"strings"
)

// Ref names a model of the Hub: ORG/NAME, at a revision (a branch, a tag
// or a commit; "main" when not given), optionally one of its quantized
// files (ORG/NAME:q4_k_m).
type Ref struct {
	Repo     string
	Revision string
	// Quant, when not empty, selects the quantized file of that type that
	// clef pull --quantize wrote for the revision.
	Quant string
}

// DefaultRevision is the revision of a Ref that gives none.
const DefaultRevision = "main"

// String formats the reference as ParseRef reads it.
func (r Ref) String() string {
	s := r.Repo
	if r.Revision != "" && r.Revision != DefaultRevision {
		s += "@" + r.Revision
	}
	if r.Quant != "" {
		s += ":" + r.Quant
	}
	return s
}

// ParseRef reads ORG/NAME, ORG/NAME@REVISION, and either with a :TYPE
// suffix.
func ParseRef(s string) (Ref, error) {
	var r Ref
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		s, r.Quant = s[:i], strings.ToLower(s[i+1:])
		if !validQuantName(r.Quant) {
			return Ref{}, fmt.Errorf("hub: %q: the quantization type after ':' must be letters, digits and '_'", r.Quant)
		}
	}
	r.Repo, r.Revision = s, DefaultRevision
	if i := strings.IndexByte(s, '@'); i >= 0 {
		r.Repo, r.Revision = s[:i], s[i+1:]
	}
	if err := ValidRepo(r.Repo); err != nil {
		return Ref{}, err
	}
	if err := ValidRevision(r.Revision); err != nil {
		return Ref{}, err
	}
	return r, nil
}

func validQuantName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidRepo checks a model repository id: ORG/NAME, each part of letters,
// digits, '-', '_' and '.', starting with a letter or digit, without "--"
// or ".." (the Hub's own rules, which also keep the id safe in a path).
func ValidRepo(id string) error {
	org, name, ok := strings.Cut(id, "/")
	if !ok || strings.Contains(name, "/") {
		return fmt.Errorf("hub: %q is not a model id: want ORG/NAME", id)
	}
	for _, p := range []string{org, name} {
		if p == "" || len(p) > 96 {
			return fmt.Errorf("hub: %q is not a model id: each of ORG and NAME has 1 to 96 characters", id)
		}
		if !isAlnum(p[0]) || strings.Contains(p, "--") || strings.Contains(p, "..") || strings.HasSuffix(p, ".") {
			return fmt.Errorf("hub: %q is not a model id: ORG and NAME start with a letter or digit and hold no \"--\" or \"..\"", id)
		}
		for i := 0; i < len(p); i++ {
			if c := p[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
				return fmt.Errorf("hub: %q is not a model id: %q is not allowed", id, string(c))
			}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidRevision checks a revision (branch, tag, commit, refs/pr/N): the
// characters git allows that are also safe as a relative path under refs/.
func ValidRevision(rev string) error {
	if rev == "" || len(rev) > 255 {
		return fmt.Errorf("hub: revision %q: want 1 to 255 characters", rev)
	}
	for _, part := range strings.Split(rev, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return fmt.Errorf("hub: revision %q is not a valid git reference", rev)
		}
	}
	for i := 0; i < len(rev); i++ {
		if c := rev[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' && c != '/' {
			return fmt.Errorf("hub: revision %q: %q is not allowed", rev, string(c))
		}
	}
	return nil
}

// validFileName checks a file name taken from a listing before it becomes
// a path under snapshots/: relative, '/'-separated, no empty, "." or ".."
// components, no backslash, colon or control characters.
func validFileName(name string) error {
	if name == "" || len(name) > 1024 {
		return fmt.Errorf("hub: file name of %d bytes in the listing", len(name))
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("hub: listing holds an unsafe file name %q", name)
		}
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == '\\' || c == ':' {
			return fmt.Errorf("hub: listing holds an unsafe file name %q", name)
		}
	}
	return nil
}

// isHex reports whether s is n lowercase hexadecimal digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IsCommit reports whether rev is a full commit hash.
func IsCommit(rev string) bool { return isHex(rev, 40) }

// folderName is the cache folder of a model repository: models--ORG--NAME.
func folderName(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// repoOfFolder is the inverse of folderName ("" when dir is not a model folder).
func repoOfFolder(dir string) string {
	rest, ok := strings.CutPrefix(dir, "models--")
	if !ok {
		return ""
	}
	org, name, ok := strings.Cut(rest, "--")
	if !ok {
		return ""
	}
	id := org + "/" + name
	if ValidRepo(id) != nil {
		return ""
	}
	return id
}
