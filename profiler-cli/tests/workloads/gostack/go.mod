module gostack

go 1.18
