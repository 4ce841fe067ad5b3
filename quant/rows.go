package quant

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// QuantizeRows quantizes rows×cols values of src (row-major) into dst as
// type t, row after row, each row as Quantize does (imatrix, when not nil,
// holds the importance of each column: its length must be a positive
// multiple of the block size dividing cols). The rows are shared among
// threads goroutines (threads <= 0: GOMAXPROCS); the result does not depend
// on threads. The first error met is returned; dst is then incomplete.
func QuantizeRows(t Type, dst []byte, src []float32, rows, cols int, imatrix []float32, threads int) error {
	rb, err := RowBytes(t, cols)
	if err != nil {
		return err
	}
	if rows < 0 || (cols > 0 && rows > maxCols/cols) {
		return fmt.Errorf("quant: %v: %d rows of %d columns: bad size", t, rows, cols)
	}
	if len(src) < rows*cols {
		return fmt.Errorf("quant: %v: %d rows of %d columns need %d values, have %d", t, rows, cols, rows*cols, len(src))
	}
	if rb > 0 && rows > len(dst)/rb {
		return fmt.Errorf("quant: %v: %d rows of %d bytes do not fit in %d bytes", t, rows, rb, len(dst))
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	threads = max(1, min(threads, rows))
	// Rows are handed out in small batches from a shared counter, so that
	// slow rows (outliers make the search longer) do not idle the others.
	batch := max(1, min(64, rows/(4*threads)))
	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		failed  atomic.Bool
		wg      sync.WaitGroup
	)
	work := func() {
		defer wg.Done()
		for !failed.Load() {
			r0 := int(next.Add(int64(batch))) - batch
			if r0 >= rows {
				return
			}
			for r := r0; r < min(rows, r0+batch); r++ {
				if err := Quantize(t, dst[r*rb:(r+1)*rb], src[r*cols:(r+1)*cols], imatrix); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("row %d: %w", r, err) })
					failed.Store(true)
					return
				}
			}
		}
	}
	wg.Add(threads)
	for range threads - 1 {
		go work()
	}
	work()
	wg.Wait()
	return first
}
