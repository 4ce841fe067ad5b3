package server

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
)

// fakeModel answers any validated request with fixed probabilities, and
// misbehaves on demand through the request's state string: "panic" panics,
// "block" waits for release (or its context), "slow" sleeps a little.
type fakeModel struct {
	release chan struct{}
	started chan struct{}
	// plain disables the misbehaviours (for the fuzzer).
	plain bool

	mu             sync.Mutex
	running, peak  int
	calls          int
	sawCancel      atomic.Bool
	closed         atomic.Bool
	decideDuration time.Duration
}

func newFake() *fakeModel {
	return &fakeModel{release: make(chan struct{}), started: make(chan struct{}, 64)}
}

func (f *fakeModel) loader(loads *atomic.Int32) Loader {
	return func(ctx context.Context, _ *Prefixes) (Model, error) {
		if loads != nil {
			loads.Add(1)
		}
		f.closed.Store(false)
		return f, nil
	}
}

func (f *fakeModel) Decide(ctx context.Context, req *api.Request) (*Decision, error) {
	f.mu.Lock()
	f.running++
	f.calls++
	f.peak = max(f.peak, f.running)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
	if f.closed.Load() {
		return nil, errors.New("decide on a closed model")
	}
	state := ""
	if req.State != nil && req.State.Kind == pyjson.String {
		state = req.State.Str
	}
	if f.plain {
		state = ""
	}
	switch state {
	case "panic":
		panic("fake model panics on purpose")
	case "block":
		f.started <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			f.sawCancel.Store(true)
			return nil, ctx.Err()
		}
	case "slow":
		time.Sleep(2 * time.Millisecond)
	}
	if f.decideDuration > 0 {
		time.Sleep(f.decideDuration)
	}
	enc := fakeEncode(req)
	probs := make([][]float32, len(enc.Questions))
	for i, q := range enc.Questions {
		probs[i] = make([]float32, len(q.OptionIDs))
		rest := float32(1)
		for k := range probs[i] {
			if k == len(probs[i])-1 {
				probs[i][k] = rest
				break
			}
			probs[i][k] = rest * 0.6
			rest -= probs[i][k]
		}
	}
	body, _ := api.Answer(req, enc, probs).MarshalJSON()
	return &Decision{Body: body, InputTokens: len(enc.InputIDs)}, nil
}

func (f *fakeModel) Close() error { f.closed.Store(true); return nil }

// fakeEncode lists each question's options in encoded order as the
// reference does (noul true,false; choice sorted; score by level).
func fakeEncode(req *api.Request) *api.Encoded {
	enc := &api.Encoded{InputIDs: make([]int, 10+len(req.Questions))}
	for _, q := range req.Questions {
		t, _ := api.ParseQuestionType(q.Type)
		eq := api.EncodedQuestion{ID: q.ID, Type: int(t)}
		switch t {
		case api.Noul:
			eq.OptionIDs = []string{"true", "false"}
		case api.Choice:
			eq.OptionIDs = append([]string(nil), q.Criteria.Keys...)
			sort.Strings(eq.OptionIDs)
		case api.Score:
			for k := range q.Criteria.Items {
				eq.OptionIDs = append(eq.OptionIDs, strconv.Itoa(k))
			}
		}
		enc.Questions = append(enc.Questions, eq)
	}
	return enc
}
