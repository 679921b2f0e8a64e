# perl bench/section.pl NAME FILE SECTION: FILE's text between the markers
# "<!-- bench/NAME: begin -->" and "<!-- bench/NAME: end -->" (those lines
# included) becomes SECTION's, which holds both markers; without them in
# FILE, SECTION is appended after one blank line. The rest of FILE stays.
# For the bench scripts that write their own part of a results file.
use strict;
use warnings;

my ($name, $file, $secfile) = @ARGV;
die "usage: section.pl NAME FILE SECTION\n" unless defined $secfile;
my ($b, $e) = ("<!-- bench/$name: begin -->", "<!-- bench/$name: end -->");
local $/;
open(my $s, "<", $secfile) or die "$secfile: $!";
my $sec = <$s>;
close($s);
my $text = "";
if (open(my $h, "<", $file)) {
	$text = <$h>;
	close($h);
}
if ($text =~ /\Q$b\E.*?\Q$e\E\n?/s) {
	$text =~ s/\Q$b\E.*?\Q$e\E\n?/$sec/s;
} else {
	$text =~ s/\n*\z/\n\n/ if $text ne "";
	$text .= $sec;
}
open(my $o, ">", "$file.tmp") or die "$file.tmp: $!";
print $o $text;
close($o);
rename("$file.tmp", $file) or die "$file: $!";
