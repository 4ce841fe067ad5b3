module github.com/clefrt/clef

go 1.26.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/hajimehoshi/go-mp3 v0.3.4
	github.com/progrium/macdriver v0.4.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	golang.org/x/image v0.48.0
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.44.0
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
