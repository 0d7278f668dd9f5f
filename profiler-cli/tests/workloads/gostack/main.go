// A Go workload for profctl's tests and bench/go.sh: a frameless leaf under a caller
// (main.main;main.caller;main.leaf), a method, a generic function, and a loop inlined into
// its caller. Usage: gostack SECONDS [GOROUTINES]; every goroutine runs the same mix.
package main

import (
	"os"
	"strconv"
	"sync"
	"time"
)

var sink uint64

// leaf calls nothing and keeps everything in registers: the compiler gives it no frame, so
// no frame pointer either.
//
//go:noinline
func leaf(x uint64) uint64 {
	for i := 0; i < 200; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	return x
}

// caller has a frame (it calls leaf); a frame-pointer walk from inside leaf skips it.
//
//go:noinline
func caller(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = leaf(x) + uint64(i)
	}
	return x
}

// spin is small enough to be inlined into its callers.
func spin(x uint64) uint64 {
	for i := 0; i < 100; i++ {
		x = x*31 + uint64(i)
	}
	return x
}

// inliner runs spin inlined.
//
//go:noinline
func inliner(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = spin(x) ^ uint64(i)
	}
	return x
}

// T has a method with a pointer receiver: main.(*T).Method.
type T struct{ v uint64 }

//go:noinline
func (t *T) Method(n int) {
	for i := 0; i < n; i++ {
		t.v = leaf(t.v) ^ uint64(i)
	}
}

// Map is generic: main.Map[...].
//
//go:noinline
func Map[E any](xs []E, f func(E) E) {
	for i := range xs {
		xs[i] = f(xs[i])
	}
}

func work(deadline time.Time) uint64 {
	t := &T{v: 1}
	xs := make([]uint64, 64)
	x := uint64(7)
	for time.Now().Before(deadline) {
		x = caller(2000, x)
		x ^= inliner(2000, x)
		t.Method(500)
		Map(xs, func(v uint64) uint64 { return spin(v + 1) })
	}
	return x ^ t.v ^ xs[3]
}

func main() {
	secs := 2.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			secs = s
		}
	}
	workers := 1
	if len(os.Args) > 2 {
		if n, err := strconv.Atoi(os.Args[2]); err == nil && n > 0 {
			workers = n
		}
	}
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := work(deadline)
			mu.Lock()
			sink ^= v
			mu.Unlock()
		}()
	}
	// The main goroutine works too, so main.main is on its stacks.
	v := work(deadline)
	wg.Wait()
	sink ^= v
	if sink == 42 {
		println("unlikely")
	}
}
