// Package status holds the JSON shapes that the daemon serves on GET /v1/ps
// and that its clients (clef ps, the menu bar) read. It is a leaf package on
// the standard library only, so a client never links the engine.
package status

import "time"

// Path is the route that serves a PS document.
const Path = "/v1/ps"

// ShutdownPath is the route that asks the daemon to finish in-flight work
// and exit (POST, bearer token when the daemon has one).
const ShutdownPath = "/v1/shutdown"

// Model states, in the order a model goes through them.
const (
	StateStarting = "starting" // process up, first load not finished
	StateLoading  = "loading"  // weights being read and warmed up
	StateReady    = "ready"    // loaded and warmed up: /health is 200
	StateUnloaded = "unloaded" // released after the idle timeout; reloads on demand
	StateFailed   = "failed"   // the last load failed; Error says why
	StateStopping = "stopping" // graceful shutdown in progress
)

// PS is the daemon's description of itself and of its models.
type PS struct {
	Daemon      Daemon       `json:"daemon"`
	Models      []Model      `json:"models"`
	Queue       Queue        `json:"queue"`
	PrefixCache *PrefixCache `json:"prefix_cache,omitempty"`
}

// Daemon describes the serving process.
type Daemon struct {
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	Addr      string    `json:"addr"`
	StartedAt time.Time `json:"started_at"`
	UptimeS   float64   `json:"uptime_s"`
}

// Model describes one model the daemon serves.
type Model struct {
	Name          string     `json:"name"`
	Path          string     `json:"path"`
	State         string     `json:"state"`
	Error         string     `json:"error,omitempty"`
	ResidentBytes int64      `json:"resident_bytes"`
	LoadedAt      *time.Time `json:"loaded_at,omitempty"`
	LoadSeconds   float64    `json:"load_s,omitempty"`
	Loads         int        `json:"loads"`
	IdleS         float64    `json:"idle_s"`
	Requests      int64      `json:"requests"`
	Errors        int64      `json:"errors"`
	InFlight      int64      `json:"in_flight"`
	P50MS         float64    `json:"p50_ms"`
	P99MS         float64    `json:"p99_ms"`
}

// Queue describes the decision queue.
type Queue struct {
	Depth    int `json:"depth"`
	Capacity int `json:"capacity"`
	MaxBatch int `json:"max_batch"`
}

// PrefixCache describes the prefix key/value cache.
type PrefixCache struct {
	Bytes     int64 `json:"bytes"`
	MaxBytes  int64 `json:"max_bytes"`
	Entries   int   `json:"entries"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Evictions int64 `json:"evictions"`
}
