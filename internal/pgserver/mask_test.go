package pgserver

import "testing"

func TestMaskURL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"url without password", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"},
		{"url with password", "postgres://alice:s3cret@db.example:5432/app", "postgres://alice:xxxxx@db.example:5432/app"},
		{"postgresql scheme", "postgresql://alice:s3cret@db/app", "postgresql://alice:xxxxx@db/app"},
		{"escaped password", "postgres://alice:p%40ss%2Fw@db/app", "postgres://alice:xxxxx@db/app"},
		{"empty password", "postgres://alice:@db/app", "postgres://alice:xxxxx@db/app"},
		{"password parameter", "postgres://alice@db/app?password=s3cret&sslmode=require", "postgres://alice@db/app?password=xxxxx&sslmode=require"},
		{"unparsable url", "postgres://alice:s3cret@db:notaport/app", "postgres://alice:xxxxx@db:notaport/app"},
		{"unparsable url with @ in password", "postgres://alice:se@cr%et@db/app", "postgres://alice:xxxxx@db/app"},
		{"dsn without password", "host=/var/run/postgresql user=postgres dbname=postgres", "host=/var/run/postgresql user=postgres dbname=postgres"},
		{"dsn with password", "host=db user=alice password=s3cret dbname=app", "host=db user=alice password=xxxxx dbname=app"},
		{"dsn with spaces around =", "host=db password = s3cret dbname=app", "host=db password = xxxxx dbname=app"},
		{"dsn with quoted password", `host=db password='s3 c\'ret' dbname=app`, "host=db password=xxxxx dbname=app"},
		{"dsn upper case", "host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MaskURL(tt.in); got != tt.want {
				t.Errorf("MaskURL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}
