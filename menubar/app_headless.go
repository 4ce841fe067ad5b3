//go:build !(darwin && cgo)

package menubar

import (
	"context"
	"fmt"
	"time"
)

// Run runs the headless front: without AppKit it prints the status line
// whenever it changes, until ctx ends.
func Run(ctx context.Context, opts Options) error {
	c := NewController(opts)
	c.watch(ctx, func(s Summary) {
		fmt.Fprintf(c.opts.Out, "%s  %s  %s\n", time.Now().Format(time.TimeOnly), s.Title, s.Detail)
	})
	return nil
}
