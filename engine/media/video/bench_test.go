package video

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkDecode1080p60s decodes a 60 s 1080p30 H.264 + AAC MP4 of about
// 15 MB (2 Mbit/s: the hosted 16 MiB limit at full length) made by the
// system ffmpeg: 1800 frames decoded, 120 kept and scaled to 682x384, and
// the soundtrack. Making the clip takes a while, once per run:
//
//	go test ./engine/media/video -run '^$' -bench Decode1080p60s -benchtime 3x
func BenchmarkDecode1080p60s(b *testing.B) {
	tl := tools(b)
	path := filepath.Join(b.TempDir(), "1080p60s.mp4")
	cmd := exec.Command(tl.FFmpeg, "-v", "error", "-nostdin", "-y",
		"-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=30:duration=60",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=60",
		"-c:v", "libx264", "-preset", "ultrafast", "-b:v", "2M", "-pix_fmt", "yuv420p",
		"-c:a", "aac", "-b:a", "96k", "-movflags", "+faststart", "-shortest", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("encoding: %v\n%s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions()
	o.MaxSeconds = 61 // the clip's soundtrack may run a few ms past 60 s
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		c, err := tl.Decode(context.Background(), data, o)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Frames) != 120 || c.Audio == nil {
			b.Fatalf("%d frames, audio %v", len(c.Frames), c.Audio != nil)
		}
	}
}
