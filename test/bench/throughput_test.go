package bench

import "testing"

// Over n rounds every ordered pair of blocks is adjacent exactly once.
func TestWilliamsBalanced(t *testing.T) {
	for _, n := range []int{2, 4, 6} {
		pairs := map[[2]int]int{}
		for r := range n {
			row := williams(r, n)
			seen := map[int]bool{}
			for i, b := range row {
				if seen[b] {
					t.Fatalf("n=%d round %d: %v repeats %d", n, r, row, b)
				}
				seen[b] = true
				if i > 0 {
					pairs[[2]int{row[i-1], b}]++
				}
			}
		}
		if len(pairs) != n*(n-1) {
			t.Errorf("n=%d: %d distinct ordered pairs, want %d", n, len(pairs), n*(n-1))
		}
		for p, c := range pairs {
			if c != 1 {
				t.Errorf("n=%d: %v adjacent %d times", n, p, c)
			}
		}
	}
}
