package validate

import (
	"math"
	"time"
)

// Duration is n units (time.Second, time.Millisecond) as a time.Duration,
// saturated at the bounds of its range rather than wrapped around them,
// so that a range check after it refuses an n no Duration holds:
// -9223372036854775808 seconds times 10⁹ wraps to 0 (the default), and
// 9223372036854775807 to a negative number. Every count of seconds or
// milliseconds a request gives becomes a Duration here.
func Duration(n int64, unit time.Duration) time.Duration {
	if unit <= 0 {
		return 0
	}
	switch u := int64(unit); {
	case n > math.MaxInt64/u:
		return math.MaxInt64
	case n < math.MinInt64/u:
		return math.MinInt64
	}
	return time.Duration(n) * unit
}
