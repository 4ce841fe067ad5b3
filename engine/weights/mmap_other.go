//go:build !unix

package weights

import "os"

// mapFile reads the whole file where mmap is not available.
func mapFile(path string) (*mapped, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &mapped{path: path, data: data}, nil
}
