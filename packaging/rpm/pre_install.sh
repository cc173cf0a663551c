# eniipd (RPM %pre): the eniipd group, before the files that name it.
if command -v systemd-sysusers >/dev/null 2>&1; then
    echo 'g eniipd -' | systemd-sysusers - || :
elif ! getent group eniipd >/dev/null; then
    groupadd --system eniipd || :
fi
