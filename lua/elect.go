package lua

// The scripts of the Election. The one that makes terms has fence.lua and
// elect_term.lua (next_term) before it.
var (
	ElectCampaign = LoadWith("elect_campaign.lua", "fence.lua", "elect_term.lua")
	ElectRenew    = Load("elect_renew.lua")
	ElectResign   = Load("elect_resign.lua")
	ElectLeader   = Load("elect_leader.lua")
)
