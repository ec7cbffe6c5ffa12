module github.com/tokend/tokend/client

go 1.26.8
