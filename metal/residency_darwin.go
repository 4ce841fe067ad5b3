//go:build darwin && arm64

package metal

// Residency sets (macOS 15): what keeps the weights on the GPU between
// passes.
//
// The weights are no-copy views over the mapped checkpoint. Metal makes a
// command buffer's buffers resident while it runs, but between passes the
// pages of a file mapping are ordinary file-backed memory: an idle server
// would find them paged out and fault them back in from disk during its next
// request. An MTLResidencySet holding every view, attached to the open's
// queue and asked to be resident (requestResidency), keeps them wired for as
// long as the request stands; the device thread renews the request every
// keepResidentEvery while the open lives (as llama.cpp's heartbeat does;
// MLX makes one standing request), and Close ends it. Only views join the
// set: scratch buffers are Metal's own memory and are reused within a pass.
//
// Before macOS 15 (no MTLResidencySetDescriptor, or a device or queue that
// does not respond to the selectors) there is no set and nothing else is
// done: each command buffer still makes its buffers resident, and after an
// idle spell the first pass pages the weights back in from the file,
// slower but correct.

import (
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// residency is one open's residency set. A nil *residency is the fallback:
// every method does nothing.
type residency struct {
	set   objc.ID
	dirty bool // allocations added or removed since the last commit
}

// newResidency makes the residency set of an open and attaches it to queue
// (device thread, inside a pool). It returns nil and says why where the OS
// has none; the note is shown in the device's name.
func newResidency(dev, queue objc.ID) (*residency, string) {
	if classMTLResidencySetDescriptor == 0 || !responds(dev, selNewResidencySet) || !responds(queue, selAddResidencySet) {
		return nil, "no residency sets (macOS 15 or later has them)"
	}
	desc := objc.ID(classMTLResidencySetDescriptor).Send(selNew)
	setLabel(desc, "clef weights")
	desc.Send(selSetInitialCapacity, uint64(1024))
	var nserr objc.ID
	set := dev.Send(selNewResidencySet, desc, unsafe.Pointer(&nserr))
	release(desc)
	if set == 0 {
		return nil, "no residency set (" + nsError(nserr) + ")"
	}
	queue.Send(selAddResidencySet, set)
	set.Send(selRequestResidency) // a standing request: views added later are covered
	return &residency{set: set}, "weights kept resident by a residency set"
}

// add puts a view in the set (committed before the next command buffer).
func (r *residency) add(buf objc.ID) {
	if r == nil {
		return
	}
	r.set.Send(selAddAllocation, buf)
	r.dirty = true
}

// remove takes a view out of the set.
func (r *residency) remove(buf objc.ID) {
	if r == nil {
		return
	}
	r.set.Send(selRemoveAllocation, buf)
	r.dirty = true
}

// flush commits the set's changes: Metal reads a set's allocations when a
// command buffer is committed.
func (r *residency) flush() {
	if r == nil || !r.dirty {
		return
	}
	r.set.Send(selCommit)
	r.dirty = false
}

// keepAlive commits pending changes and renews the residency request.
func (r *residency) keepAlive() {
	if r == nil {
		return
	}
	r.flush()
	r.set.Send(selRequestResidency)
}

// close detaches the set from queue, ends its residency, empties and
// releases it. Apple's driver may keep a set's memory wired until the
// queue runs more work (llama.cpp found this and runs a token command
// buffer after freeing its sets), so a one-byte fill is run on the queue
// before it is released (not when the queue is lost: the GPU stopped
// serving it, and the fill would never complete).
func (r *residency) close(dev, queue objc.ID, queueAlive bool) {
	if r == nil {
		return
	}
	queue.Send(selRemoveResidencySet, r.set)
	r.set.Send(selEndResidency)
	r.set.Send(selRemoveAllAllocations)
	r.set.Send(selCommit)
	release(r.set)
	r.set = 0
	if !queueAlive {
		return
	}

	buf := dev.Send(selNewBufferWithLength, uint64(16), uint64(mtlResourceStorageModePrivate))
	cmd := queue.Send(selCommandBuffer)
	if buf == 0 || cmd == 0 {
		release(buf)
		return
	}
	if blit := cmd.Send(selBlitCommandEncoder); blit != 0 {
		blit.Send(selFillBuffer, buf, nsRange{0, 16}, uint8(0))
		blit.Send(selEndEncoding)
	}
	cmd.Send(selCommit)
	pollStatus(cmd, afterFailureWait)
	release(buf)
}
