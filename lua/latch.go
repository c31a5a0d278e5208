package lua

// The scripts of the CountDownLatch.
var (
	LatchCountDown = Load("latch_countdown.lua")
	LatchDelete    = Load("latch_delete.lua")
)
