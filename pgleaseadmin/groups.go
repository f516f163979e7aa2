package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/pglease"
)

// Group is one shard group as pglease.group_list and pglease.group_status
// show it (docs/groups.md).
type Group struct {
	// Name is the group's name.
	Name string
	// Role is the database role the group belongs to.
	Role string
	// Shards is the group's number of shards.
	Shards int
	// Members are the live members, by name.
	Members []GroupMember
	// Unowned is the number of shards no live member owns.
	Unowned int
}

// GroupMember is one live member of a group.
type GroupMember struct {
	// Name is the member's name (shardgroup.Config.Member).
	Name string
	// MaxShards is the member's maximum; 0 for none.
	MaxShards int
	// Shards is how many shards it owns; HandingOver how many of them it
	// has been asked to hand over.
	Shards, HandingOver int
	// ExpiresAt is when its membership lapses without another sync.
	ExpiresAt time.Time
}

// Groups returns every shard group with its members, by name. Read-only.
func Groups(ctx context.Context, database pglease.DB) ([]Group, error) {
	q := db.New(database)
	l, err := q.GroupList(ctx)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out := make([]Group, 0, len(l.Names))
	for i, name := range l.Names {
		g := Group{Name: name, Role: l.GroupRoles[i], Shards: int(l.Shards[i]), Members: []GroupMember{}}
		rows, err := q.GroupStatus(ctx, name)
		if err != nil {
			return nil, interpret(ctx, err)
		}
		for _, r := range rows {
			if r.Member == "" {
				g.Unowned = int(r.Shards)
				continue
			}
			g.Members = append(g.Members, GroupMember{Name: r.Member, MaxShards: int(r.MaxShards),
				Shards: int(r.Shards), HandingOver: int(r.HandingOver), ExpiresAt: r.ExpiresAt})
		}
		out = append(out, g)
	}
	return out, nil
}
