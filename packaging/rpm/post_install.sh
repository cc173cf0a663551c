# eniipd (RPM %post): $1 is 1 on install, 2 on upgrade.
install -d -m 0700 -o root -g root /var/lib/eniipd
if command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ]; then
    cat <<'MSG'
eniipd is installed but not started. Give the instance a RAM role with the
policy in eniipd(8) (or put an access key in /etc/eniipd/eni.json, mode
0600), check it with eniipd --check-config, and start it: systemctl enable --now eniipd.socket eniipd.service
MSG
elif command -v systemctl >/dev/null 2>&1; then
    # An upgrade restarts it only if it was running.
    systemctl try-restart eniipd.service >/dev/null 2>&1 || :
fi
