# eniipd (RPM %postun): $1 is 0 on erase. RPM has no purge: an edited
# /etc/eniipd/eni.json is kept as eni.json.rpmsave, and /var/lib/eniipd is
# kept because it records the ENIs and addresses this node holds in the
# cloud (an eniipd installed later takes them over from it).
if command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 0 ] && [ -d /var/lib/eniipd ]; then
    echo "eniipd: /var/lib/eniipd is kept: it records the ENIs and addresses this node holds in the cloud (see eniipd(8), FILES)."
fi
