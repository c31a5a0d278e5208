package redisync

// anyOpt is an option of any kind of lock, for the tests' helpers that make
// several kinds with one list of options.
type anyOpt = option

// as converts options kept in one list for several kinds of lock to the
// option type O of one constructor. It panics on an option that does not
// apply to O's primitive (a test's mistake); a nil option stays nil (to
// test that it is refused).
func as[O option, I any](opts []I) []O {
	out := make([]O, 0, len(opts))
	for _, o := range opts {
		if any(o) == nil {
			var zero O
			out = append(out, zero)
			continue
		}
		out = append(out, any(o).(O))
	}
	return out
}
