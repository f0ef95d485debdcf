package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// MaxTheta is the largest Zipf exponent the lab accepts.
const MaxTheta = 2.0

// Zipf draws ranks in [0, n) with P(rank k) proportional to 1/(k+1)^θ,
// for any θ ≥ 0: θ = 0 is uniform, θ = 0.99 is YCSB's default skew, and
// θ ≥ 1 concentrates the draws further on the lowest ranks. Go's
// rand.Zipf needs an exponent above 1, so it cannot produce the usual
// benchmark skews.
//
// It uses the method of Gray et al. ("Quickly generating billion-record
// synthetic databases", SIGMOD 1994), as YCSB's ZipfianGenerator does:
// ranks 0 and 1 get their exact probabilities, the rest come from a
// closed-form inverse of an integral approximation of the cumulative
// distribution. The formula is rewritten with expm1 and log1p so that it
// stays accurate near θ = 1 and takes its limit (logarithms) at θ = 1,
// where the textbook form divides by zero. The constant setup costs O(n)
// once; each draw is O(1).
//
// A Zipf holds no random state: it is safe for concurrent use, each
// goroutine passing its own *rand.Rand to Next.
type zipfDist struct {
	n     int
	theta float64
	zetan float64 // Σ_{i=1..n} 1/i^θ
	p0    float64 // u below this: rank 0 (1/zetan)
	p01   float64 // u below this: rank 0 or 1 ((1+2^-θ)/zetan)
	g2    float64 // g(2/n)
	tail  float64 // 1 − p01: the probability of ranks ≥ 2
}

// newZipf returns a generator of ranks in [0, n) with exponent theta
// (0 ≤ theta ≤ MaxTheta).
func newZipf(n int, theta float64) (*zipfDist, error) {
	if n < 1 {
		return nil, fmt.Errorf("benchmarks: zipf over %d keys, need at least 1", n)
	}
	if math.IsNaN(theta) || theta < 0 || theta > MaxTheta {
		return nil, fmt.Errorf("benchmarks: zipf theta %v out of range [0, %v]", theta, MaxTheta)
	}
	z := &zipfDist{n: n, theta: theta}
	z.zetan = zeta(n, theta)
	z.p0 = 1 / z.zetan
	z.p01 = (1 + math.Pow(2, -theta)) / z.zetan
	if n > 2 {
		z.g2 = z.g(2 / float64(n))
		z.tail = 1 - z.p01
	}
	return z, nil
}

// zeta returns Σ_{i=1..n} 1/i^θ, summed from the smallest terms up.
func zeta(n int, theta float64) float64 {
	var s float64
	for i := n; i >= 1; i-- {
		s += math.Pow(float64(i), -theta)
	}
	return s
}

// g is the shape of the approximated cumulative distribution: (y^(1−θ) −
// 1)/(1−θ), which tends to ln y as θ → 1.
func (z *zipfDist) g(y float64) float64 {
	a := 1 - z.theta
	if a == 0 {
		return math.Log(y)
	}
	return math.Expm1(a*math.Log(y)) / a
}

// ginv is g's inverse.
func (z *zipfDist) ginv(c float64) float64 {
	a := 1 - z.theta
	if a == 0 {
		return math.Exp(c)
	}
	return math.Exp(math.Log1p(a*c) / a)
}

// Rank maps u in [0, 1) to a rank; it is non-decreasing in u (an inverse
// cumulative distribution).
func (z *zipfDist) Rank(u float64) int {
	switch {
	case u < z.p0 || z.n == 1:
		return 0
	case u < z.p01 || z.n == 2:
		return 1
	}
	c := z.g2 * (1 - u) / z.tail
	r := int(float64(z.n) * z.ginv(c))
	return min(max(r, 2), z.n-1)
}

// Next draws a rank with r.
func (z *zipfDist) Next(r *rand.Rand) int { return z.Rank(r.Float64()) }

// Prob returns the exact probability of rank k under the Zipf law (the
// generator approximates it for ranks ≥ 2).
func (z *zipfDist) Prob(k int) float64 {
	if k < 0 || k >= z.n {
		return 0
	}
	return math.Pow(float64(k+1), -z.theta) / z.zetan
}

// Collision returns the probability that two independent draws pick the
// same rank, Σ P(k)²: 1/n when uniform, 1 for a single key. The lab uses
// it to order grid points by contention.
func (z *zipfDist) Collision() float64 {
	var s float64
	for k := z.n - 1; k >= 0; k-- {
		p := z.Prob(k)
		s += p * p
	}
	return s
}
