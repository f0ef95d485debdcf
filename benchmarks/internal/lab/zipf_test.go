package lab

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// drawRanks returns the frequency of each rank over n draws with a fixed seed.
func drawRanks(t *testing.T, keys int, theta float64, n int, seed uint64) []float64 {
	t.Helper()
	z, err := newZipf(keys, theta)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	counts := make([]float64, keys)
	for range n {
		counts[z.Next(r)]++
	}
	for i := range counts {
		counts[i] /= float64(n)
	}
	return counts
}

func TestZipfThetaZeroIsUniform(t *testing.T) {
	const keys, n = 20, 200_000
	freq := drawRanks(t, keys, 0, n, 1)
	// Pearson's chi-square against the uniform law, 19 degrees of
	// freedom: 43.8 is the 0.1% critical value.
	var chi2 float64
	want := float64(n) / keys
	for _, f := range freq {
		d := f*n - want
		chi2 += d * d / want
	}
	if chi2 > 43.8 {
		t.Errorf("θ=0: chi-square %.1f against uniform over %d keys, want below 43.8; frequencies %v", chi2, keys, freq)
	}
}

func TestZipfConcentratesWithTheta(t *testing.T) {
	const keys, n = 1000, 200_000
	thetas := []float64{0, 0.3, 0.6, 0.8, 0.9, 0.99, 1, 1.1, 1.2}
	prevTop, prevTop10 := -1.0, -1.0
	for _, th := range thetas {
		freq := drawRanks(t, keys, th, n, 2)
		top, top10 := freq[0], 0.0
		for _, f := range freq[:10] {
			top10 += f
		}
		if top <= prevTop || top10 <= prevTop10 {
			t.Errorf("θ=%v: rank 0 has %.4f and the top 10 ranks %.4f of the draws; at the previous θ %.4f and %.4f: higher θ must concentrate more", th, top, top10, prevTop, prevTop10)
		}
		prevTop, prevTop10 = top, top10
	}
}

func TestZipfMatchesTheLaw(t *testing.T) {
	const keys, n = 1000, 400_000
	for _, th := range []float64{0.5, 0.99, 1, 1.2} {
		z, _ := newZipf(keys, th)
		freq := drawRanks(t, keys, th, n, 3)
		// Ranks 0 and 1 are drawn with their exact probabilities.
		for k := range 2 {
			if d := math.Abs(freq[k] - z.Prob(k)); d > 0.004 {
				t.Errorf("θ=%v: rank %d drawn %.4f of the time, the law says %.4f", th, k, freq[k], z.Prob(k))
			}
		}
		// The rest follows Gray et al.'s approximation: cumulative
		// shares within 0.03 of the law's.
		for _, top := range []int{3, 10, 100, 500} {
			var got, want float64
			for k := range top {
				got += freq[k]
				want += z.Prob(k)
			}
			if math.Abs(got-want) > 0.03 {
				t.Errorf("θ=%v: top %d ranks drawn %.4f of the time, the law says %.4f", th, top, got, want)
			}
		}
	}
}

func TestZipfDeterministic(t *testing.T) {
	z, _ := newZipf(500, 0.99)
	seq := func(seed uint64) []int {
		r := rand.New(rand.NewPCG(seed, 1))
		out := make([]int, 1000)
		for i := range out {
			out[i] = z.Next(r)
		}
		return out
	}
	a, b, c := seq(7), seq(7), seq(8)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draw %d: %d and %d", i, a[i], b[i])
		}
	}
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("different seeds gave the same 1000 draws")
	}
}

// TestZipfRankProperties: for any size, exponent and u, the rank is in
// range, and it never decreases as u grows (Rank is an inverse cumulative
// distribution).
func TestZipfRankProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5000).Draw(t, "n")
		theta := rapid.Float64Range(0, MaxTheta).Draw(t, "theta")
		z, err := newZipf(n, theta)
		if err != nil {
			t.Fatal(err)
		}
		u1 := rapid.Float64Range(0, 1).Draw(t, "u1")
		u2 := rapid.Float64Range(0, 1).Draw(t, "u2")
		if u1 >= 1 || u2 >= 1 {
			t.Skip("u must be below 1")
		}
		if u1 > u2 {
			u1, u2 = u2, u1
		}
		r1, r2 := z.Rank(u1), z.Rank(u2)
		if r1 < 0 || r2 >= n {
			t.Fatalf("ranks %d, %d out of [0, %d)", r1, r2, n)
		}
		if r1 > r2 {
			t.Fatalf("Rank(%v) = %d > Rank(%v) = %d", u1, r1, u2, r2)
		}
	})
}

func TestZipfInvalid(t *testing.T) {
	for _, c := range []struct {
		n     int
		theta float64
	}{{0, 0.5}, {10, -0.1}, {10, MaxTheta + 0.1}, {10, math.NaN()}} {
		if _, err := newZipf(c.n, c.theta); err == nil {
			t.Errorf("newZipf(%d, %v) accepted", c.n, c.theta)
		}
	}
	z, _ := newZipf(1000, 0)
	if c := z.Collision(); math.Abs(c-0.001) > 1e-12 {
		t.Errorf("uniform collision probability over 1000 keys = %v, want 0.001", c)
	}
	z, _ = newZipf(1, 1.2)
	if c := z.Collision(); c != 1 {
		t.Errorf("one key: collision probability %v, want 1", c)
	}
}
