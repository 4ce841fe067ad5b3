#!/usr/bin/env python3
"""Makes the video decoding goldens of this folder.

Run from this folder with the system Python 3 (PyAV 10, FFmpeg 5.1 libraries):
    /usr/bin/python3 gen.py          # encode the clips, then decode them
    /usr/bin/python3 gen.py --decode # decode the committed clips only

The clips are encoded with the system ffmpeg (FFmpeg 5.1). Each is then
decoded as the Clef-Omni reference decodes a video with PyAV: the first
video stream's frames, a frame kept when frame.time >= kept/2 - 1e-6, frames
of more than 262,144 pixels scaled down with even sides (the size rule below,
written out in engine/media/video ScaledSize), each converted with
frame.to_ndarray(format="rgb24", width=W, height=H); the first audio stream
through av.AudioResampler(format="flt", layout="mono", rate=16000), flushed.
"""
import io
import math
import subprocess
import sys

import av
import numpy as np

MAX_PIXELS = 262144
FPS = 2.0

# name: (ffmpeg arguments after the inputs, inputs)
CLIPS = {
    # H.264 with B-frames (reordered timestamps, an edit list), BT.709-tagged,
    # limited range; stereo AAC at 44.1 kHz. Moov after mdat.
    "h264_aac_bt709.mp4": (
        ["-f", "lavfi", "-i", "testsrc2=size=96x64:rate=10:duration=1.6",
         "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=1.6"],
        ["-ac", "2", "-c:v", "libx264", "-preset", "veryfast", "-crf", "30", "-pix_fmt", "yuv420p",
         "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
         "-c:a", "aac", "-b:a", "32k", "-shortest"]),
    # VP9 and stereo Opus at 48 kHz in WebM, BT.709-tagged, odd frame rate.
    "vp9_opus.webm": (
        ["-f", "lavfi", "-i", "testsrc2=size=98x62:rate=15:duration=1.6",
         "-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000:duration=1.6"],
        ["-ac", "2", "-c:v", "libvpx-vp9", "-deadline", "good", "-cpu-used", "4", "-b:v", "60k",
         "-pix_fmt", "yuv420p", "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709",
         "-c:a", "libopus", "-b:a", "24k", "-shortest"]),
    # Full-range H.264 (yuvj420p) larger than 262,144 pixels, so scaled down;
    # 5.1 AAC at 48 kHz (downmixed to mono). Fast start (moov first).
    "h264_fullrange_big.mp4": (
        ["-f", "lavfi", "-i", "testsrc2=size=720x400:rate=10:duration=0.3",
         "-f", "lavfi", "-i", "sine=frequency=250:sample_rate=48000:duration=0.3"],
        ["-filter_complex", "[1:a]pan=5.1|c0=c0|c1=0.5*c0|c2=0.25*c0|c3=0.1*c0|c4=0.7*c0|c5=0.3*c0[a]",
         "-map", "0:v", "-map", "[a]", "-c:v", "libx264", "-preset", "veryfast", "-crf", "36",
         "-pix_fmt", "yuvj420p", "-c:a", "aac", "-b:a", "64k", "-movflags", "+faststart", "-shortest"]),
}


def scaled_size(w, h):
    if w * h <= MAX_PIXELS:
        return w, h
    s = math.sqrt(MAX_PIXELS / (w * h))
    return max(2, int(w * s) // 2 * 2), max(2, int(h * s) // 2 * 2)


def frames(data):
    c = av.open(io.BytesIO(data))
    out, times = [], []
    for f in c.decode(c.streams.video[0]):
        t = f.time
        if t < len(out) / FPS - 1e-6:
            continue
        w, h = scaled_size(f.width, f.height)
        out.append(f.to_ndarray(format="rgb24", width=w, height=h))
        times.append(t)
    return np.stack(out), np.array(times, dtype=np.float64)


def soundtrack(data):
    c = av.open(io.BytesIO(data))
    r = av.AudioResampler(format="flt", layout="mono", rate=16000)
    parts = []
    for f in c.decode(c.streams.audio[0]):
        parts += [o.to_ndarray().reshape(-1) for o in r.resample(f)]
    parts += [o.to_ndarray().reshape(-1) for o in r.resample(None)]
    return np.concatenate(parts).astype(np.float32)


def main():
    if "--decode" not in sys.argv:
        for name, (inputs, args) in CLIPS.items():
            subprocess.run(["ffmpeg", "-v", "error", "-y", *inputs, *args, "-map_metadata", "-1",
                            "-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact", name],
                           check=True)
    for name in CLIPS:
        data = open(name, "rb").read()
        stem = name.rsplit(".", 1)[0]
        f, t = frames(data)
        a = soundtrack(data)
        np.save(stem + "_frames.npy", f)
        np.save(stem + "_times.npy", t)
        np.save(stem + "_audio.npy", a)
        print(f"{name}: {len(data)} bytes, frames {f.shape}, times {t.tolist()}, audio {a.shape}")


if __name__ == "__main__":
    main()
