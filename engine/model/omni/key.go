package omni

import (
	"crypto/sha256"
	"encoding/binary"
)

// MediaDigest returns the SHA-256 of a record's media as the request sent
// them: the bytes of every image, audio clip and video (each the encoded
// file, base64-decoded), in request order, and whether the videos are
// heard (use_audio_in_video). The token ids of a record do not tell two
// pictures (or clips) of one size apart, so a prefix-cache key over a
// prefix that holds media must cover this digest too. Decoding and the
// processors are deterministic, so equal bytes give equal tower outputs
// for one model and processor configuration (which the key's model
// identity covers).
func MediaDigest(images, audio, videos [][]byte, heard bool) [32]byte {
	h := sha256.New()
	h.Write([]byte("clef media v1\x00"))
	var n [8]byte
	for _, kind := range [][][]byte{images, audio, videos} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(kind)))
		h.Write(n[:])
		for _, item := range kind {
			binary.LittleEndian.PutUint64(n[:], uint64(len(item)))
			h.Write(n[:])
			h.Write(item)
		}
	}
	if heard {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}
