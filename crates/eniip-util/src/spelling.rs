//! How far apart two words are, for "did you mean" (a config key, a
//! command verb): the optimal string alignment distance.

/// Insertions, deletions, substitutions and swaps of neighbours that turn
/// `a` into `b`, counted on characters. Quadratic: callers bound the
/// lengths of what a user can send.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_is_one_edit() {
        assert_eq!(edit_distance("stauts", "status"), 1);
        assert_eq!(edit_distance("alloc", "alloc"), 0);
        assert_eq!(edit_distance("", "ping"), 4);
        assert_eq!(edit_distance("relase", "release"), 1);
        assert_eq!(edit_distance("abc", "xyz"), 3);
    }
}
