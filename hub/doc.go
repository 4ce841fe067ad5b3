// Package hub fetches models from the Hugging Face Hub into the cache that
// huggingface_hub (and every tool built on it: transformers, mlx-lm,
// llama.cpp) uses, and finds them there again by name.
//
// # Cache
//
// The cache directory is $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A model
// ORG/NAME lives in models--ORG--NAME/:
//
//	blobs/ETAG                 file contents, named by the sha256 of the file
//	                           for LFS files and by the git blob sha1 for the
//	                           others (the Hub's ETag for each)
//	blobs/ETAG.incomplete      a transfer in progress, resumed with a Range request
//	snapshots/COMMIT/FILE      relative symlink to ../../blobs/ETAG (one more
//	                           ../ per directory level of FILE)
//	refs/REVISION              the commit REVISION pointed to when it was fetched
//
// Files fetched by Python tools are reused, and Python tools reuse what this
// package writes. Transfers take the lock file huggingface_hub takes
// (.locks/models--ORG--NAME/ETAG.lock) where the platform has flock.
//
// Quantized models written by clef pull --quantize go next to the cache, in
// clef/quantized/ORG--NAME/COMMIT/TYPE.gguf (+ TYPE.head.gguf) under
// $HF_HOME (or the parent of $HF_HUB_CACHE when only that is set).
//
// # Protocol
//
// A revision becomes a commit, with the file list (sizes, git blob ids and,
// for LFS files, sha256), through GET /api/models/ORG/NAME/revision/REV?blobs=true.
// Each file is then fetched from /ORG/NAME/resolve/COMMIT/FILE, whose LFS
// answers redirect to a CDN. Every file is verified before it is renamed
// into blobs/: its size, and its sha256 (LFS) or git blob sha1 (others).
//
// # Environment
//
// HF_ENDPOINT (a mirror; https only, plain http only on loopback), HF_TOKEN
// (else $HF_TOKEN_PATH, else $HF_HOME/token, the file huggingface-cli login
// writes), HF_HUB_OFFLINE (no network: names resolve from the cache only).
//
// # Safety
//
// Repository ids, revisions and every file name of a listing are validated
// (no absolute paths, no "..", no backslashes), redirects are followed only
// to https (or loopback), the token is sent only to the endpoint's own host
// and never printed, and failed requests are retried a bounded number of
// times with backoff, honouring Retry-After on 429 and 503.
package hub
