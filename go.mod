module github.com/clefrt/clef

go 1.26
