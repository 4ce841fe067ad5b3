//go:build darwin && arm64

package main

import _ "github.com/clefrt/clef/metal"
