module github.com/globalmirror/globalmirror/test/tools/apiserver

go 1.26.0
