#!/bin/sh
# Records in sql/released.sha256 the checksums of the released schema files
# not yet recorded there (make freeze): run it once a version stops being
# head, after recording its catalog (sql/versions says how). The files are
# those scripts/released-files.sh lists. It never changes a checksum already
# recorded: it stops, naming the file, when a recorded file changed, since
# freezing again would bless an edit that no database that applied the
# file will ever see.
set -eu
cd "$(dirname "$0")/.."

if ! out=$(sha256sum -c --quiet sql/released.sha256 2>&1); then
    echo "freeze: a released schema file changed; restore it (git checkout -- FILE), never re-freeze it:" >&2
    printf '%s\n' "$out" >&2
    exit 1
fi
files=$(./scripts/released-files.sh)
added=0
for f in $files; do
    grep -q "  $f\$" sql/released.sha256 && continue
    sha256sum "$f" >>sql/released.sha256
    echo "freeze: recorded $f" >&2
    added=$((added + 1))
done
echo "freeze: $added file(s) recorded; sql/released.sha256 lists $(wc -l <sql/released.sha256)" >&2
