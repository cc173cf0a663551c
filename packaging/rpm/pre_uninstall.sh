# eniipd (RPM %preun): $1 is 0 on erase, 1 on upgrade. Erase stops and
# disables the units; state and config stay (see %postun).
if [ "$1" -eq 0 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now eniipd.service eniipd.socket >/dev/null 2>&1 || :
fi
