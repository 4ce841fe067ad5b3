// Package processor turns decoded media into the tensors the thinker's
// towers read, exactly as the reference's Qwen3-Omni processor call makes
// them (spec qwen3-omni-thinker §4.3, §4.4, §5.1, §5.4; clef-omni §1.2):
//
//   - pictures: the Qwen2-VL image processor — smart_resize to multiples of
//     patch·merge within the pixel limits (the clef-omni reference passes
//     ImageSize), Pillow's bicubic resize, rescale 1/255, normalise with the
//     release's mean and std, duplicate to temporal_patch_size frames and cut
//     into patch rows in merge-block order;
//   - sound: the Whisper log-mel feature extractor — periodic Hann window,
//     centred STFT with reflect padding, power spectrum, Slaney mel filters,
//     log10 with the per-clip max−8 floor, (x+4)/4 — plus the number of audio
//     placeholder tokens a clip becomes.
//
// The image path is bit-exact with the reference (Pillow's fixed-point
// resampler, the reference's float32 rounding steps). The log-mel is computed
// in float64: it matches the reference's float64 (numpy) path to the float32
// rounding of the output, and its default float32 (torch.stft) path to that
// path's own float32 error (a few 1e-5).
//
// The package depends only on the decoded media types and the release's
// processor settings; it never imports model or backend code.
package processor
